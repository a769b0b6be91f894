"""The /topgun face over real sockets with a raw MsgPack client: in-band auth, the deadline
for an idle unauthenticated socket, write concerns against the real journal, and the order
of replies behind a durable ack."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import msgspec

from octosync.client import lazily
from octosync.server.auth import AuthConfig, issue_token
from octosync.server.topgun_state import topgun_state
from octosync.store.journal import Journal
from octosync.wire import topgun as tg
from tests.e2e.helpers import TIMEOUT, recv_json, serve, spawn_server, ws_lazily
from tests.e2e.test_hostile import closed_with
from tests.hub.helpers import cell_set
from tests.topgun.helpers import batch, put

SECRET = "topgun-face-secret-of-at-least-32-bytes"


async def recv(ws: aiohttp.ClientWebSocketResponse) -> tg.Message:
    msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
    assert msg.type == aiohttp.WSMsgType.BINARY, msg
    return tg.decode(msg.data)


def error_name(msg: tg.Message) -> str:
    assert isinstance(msg, tg.Error), msg
    return str(msgspec.msgpack.decode(msg.payload.details)["name"])


async def test_nothing_but_auth_is_served_before_the_token_and_an_idle_socket_is_closed(
    tmp_path: Path,
) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth, handshake_timeout=0.5) as srv,
        aiohttp.ClientSession() as http,
    ):
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        assert isinstance(await recv(ws), tg.AuthRequired)
        await ws.send_bytes(tg.encode(batch(put("1", "u1", 1, 10))))  # dropped, as TopGun does
        await ws.send_bytes(tg.encode(tg.DeviceHello()))  # dropped: this server wants a JWT
        await ws.send_bytes(tg.encode(tg.Ping(timestamp=7)))
        pong = await recv(ws)
        assert isinstance(pong, tg.Pong)
        assert pong.timestamp == 7
        assert error_name(await recv(ws)) == "HandshakeFailed"  # the deadline passed
        assert await closed_with(ws) == 1008
        assert topgun_state(srv.runtime).core.maps.live_items("users") == {}

        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        assert isinstance(await recv(ws), tg.AuthRequired)
        await ws.send_bytes(tg.encode(tg.Auth(token=issue_token("wrong-secret" * 4, "x", {}))))
        fail = await recv(ws)
        assert isinstance(fail, tg.AuthFail)
        assert fail.code == 401
        assert await closed_with(ws) == 1008

        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await recv(ws)
        token = issue_token(SECRET, "alice", {}, maps={"users": ["read", "write"]})
        await ws.send_bytes(tg.encode(tg.Auth(token=token)))
        ack = await recv(ws)
        assert isinstance(ack, tg.AuthAck)
        assert ack.server_node_id == "octosync"  # a single server; in a cluster, its node id
        await ws.send_bytes(tg.encode(tg.Auth(token=token)))  # TopGun's client sends it twice
        await ws.send_bytes(tg.encode(tg.Ping(timestamp=8)))
        after = await recv(ws)  # taken quietly: no second AUTH_ACK, no error
        assert isinstance(after, tg.Pong), after
        await ws.close()


async def test_persisted_is_acknowledged_after_the_commit_and_later_replies_wait_for_it(
    tmp_path: Path,
) -> None:
    async with (
        serve(tmp_path, journal=True) as srv,
        aiohttp.ClientSession() as http,
    ):
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(tg.encode(tg.DeviceHello()))
        assert isinstance(await recv(ws), tg.DeviceAck)
        ops = [put(str(i), f"k{i}", i, 100 + i) for i in range(1, 51)]
        await ws.send_bytes(tg.encode(batch(*ops, write_concern="PERSISTED")))
        await ws.send_bytes(tg.encode(tg.Ping(timestamp=1)))
        ack = await recv(ws)
        assert isinstance(ack, tg.OpAck), "the PONG overtook the durable ack"
        assert ack.payload.achieved_level == "PERSISTED"
        assert ack.payload.last_id == "50"
        assert all(r.success for r in ack.payload.results or [])
        with Journal(tmp_path, readonly=True) as journal:  # committed before the ack was sent
            assert sorted(r.key for r in journal.all_ops()) == sorted(f"k{i}" for i in range(1, 51))
        assert isinstance(await recv(ws), tg.Pong)

        await ws.send_bytes(tg.encode(batch(put("51", "k1", "new", 500), write_concern="APPLIED")))
        ack = await recv(ws)
        assert isinstance(ack, tg.OpAck)
        assert ack.payload.achieved_level == "APPLIED"
        await ws.close()


async def _device(http: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(f"{url}/topgun")
    await ws.send_bytes(tg.encode(tg.DeviceHello()))
    assert isinstance(await recv(ws), tg.DeviceAck)
    return ws


async def _lock(ws: aiohttp.ClientWebSocketResponse, rid: str, name: str) -> int:
    await ws.send_bytes(tg.encode(tg.LockRequest(tg.LockRequestPayload(rid, name, 60_000))))
    granted = await recv(ws)
    assert isinstance(granted, tg.LockGranted), granted
    return int(granted.payload.fencing_token)


async def test_fencing_tokens_keep_growing_and_counters_survive_a_sigkill(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as first, aiohttp.ClientSession() as http:
        ws = await _device(http, first.url)
        tokens = [await _lock(ws, "r1", "printer")]
        release = tg.LockRelease(tg.LockReleasePayload("printer", tokens[0], "r1"))
        await ws.send_bytes(tg.encode(release))
        assert isinstance(await recv(ws), tg.LockReleased)
        tokens.append(await _lock(ws, "r2", "printer"))
        state = tg.CounterState.of({"n1": 5, "n2": 1}, {"n1": 2})
        await ws.send_bytes(tg.encode(tg.CounterSync(tg.CounterStatePayload("likes", state))))
        assert isinstance(await recv(ws), tg.CounterUpdate)
        # a PERSISTED ack comes after every record queued before it is committed
        await ws.send_bytes(tg.encode(batch(put("1", "k", 1, 100), write_concern="PERSISTED")))
        ack = await recv(ws)
        assert isinstance(ack, tg.OpAck)
        assert ack.payload.achieved_level == "PERSISTED"
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    async with spawn_server(tmp_path) as second, aiohttp.ClientSession() as http:
        ws = await _device(http, second.url)
        after = await _lock(ws, "r3", "scanner")
        assert after > max(tokens)  # a lock never held before the restart: still a new token
        await ws.send_bytes(tg.encode(tg.CounterRequest(tg.CounterName("likes"))))
        reply = await recv(ws)
        assert isinstance(reply, tg.CounterResponse)
        assert reply.payload.state.sides() == ({"n1": 5, "n2": 1}, {"n1": 2})
        await ws.close()


def _js_put(op_id: str, key: str, millis: int, counter: int) -> dict[str, object]:
    """A PUT as TopGun's client encodes it: millis above 2^32 as a float64."""
    stamp = {"millis": float(millis), "counter": counter, "nodeId": "js-client"}
    record = {"value": op_id, "timestamp": stamp}
    return {"id": op_id, "mapName": "users", "opType": "PUT", "key": key, "record": record}


def _js_batch(*ops: dict[str, object]) -> bytes:
    payload = {"ops": list(ops), "writeConcern": "PERSISTED"}
    return msgspec.msgpack.encode({"type": "OP_BATCH", "payload": payload})


async def test_a_number_out_of_range_refuses_its_frame_and_acked_ops_survive_a_restart(
    tmp_path: Path,
) -> None:
    """An HLC counter past 2^31 - 1 (more than a journal record holds) refuses the frame as it
    decodes, naming the frame's field, nothing of the frame applied; the server keeps serving,
    and after a SIGKILL it starts again with every op it acknowledged."""
    millis = 1_700_000_000_000
    async with spawn_server(tmp_path) as first, aiohttp.ClientSession() as http:
        ws = await _device(http, first.url)
        await ws.send_bytes(_js_batch(_js_put("1", "a", millis, 0)))
        ack = await recv(ws)
        assert isinstance(ack, tg.OpAck), ack
        assert ack.payload.achieved_level == "PERSISTED"
        await ws.send_bytes(
            _js_batch(_js_put("2", "b", millis, 1), _js_put("3", "c", millis, 2**31))
        )
        refused = await recv(ws)
        assert error_name(refused) == "DecodeError"
        assert isinstance(refused, tg.Error)
        details = msgspec.msgpack.decode(refused.payload.details)
        assert details["path"] == "payload.ops[1].record.timestamp.counter"
        await ws.send_bytes(tg.encode(tg.Ping(millis)))
        assert isinstance(await recv(ws), tg.Pong)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    async with spawn_server(tmp_path) as second, aiohttp.ClientSession() as http:
        ws = await _device(http, second.url)
        await ws.send_bytes(tg.encode(tg.QuerySub(tg.QuerySubPayload("q", "users"))))
        reply = await recv(ws)
        assert isinstance(reply, tg.QueryResp), reply
        assert [r.key for r in reply.payload.results] == ["a"]
        await ws.close()


async def test_http_sync_refuses_a_bad_number_naming_its_field(tmp_path: Path) -> None:
    """``POST /topgun/sync`` whose HLC counter is past 2^31 - 1: 400, the error's ``context``
    the field; the server answers the next request."""
    stamp = {"millis": 1_700_000_000_000.0, "counter": 2**31, "nodeId": "c"}
    async with serve(tmp_path, journal=True) as srv, aiohttp.ClientSession() as http:
        url = f"{srv.url}/topgun/sync"
        replies = []
        for counter in (2**31, 0):
            body = {"clientId": "c", "clientHlc": {**stamp, "counter": counter}}
            async with http.post(url, data=msgspec.msgpack.encode(body)) as resp:
                replies.append((resp.status, msgspec.msgpack.decode(await resp.read())))
    (bad_status, bad), (good_status, good) = replies
    assert (bad_status, good_status) == (400, 200)
    (error,) = bad["errors"]
    assert error["message"].startswith("DecodeError: ")
    assert error["context"] == "clientHlc.counter"
    assert "errors" not in good


async def test_a_topgun_map_is_a_read_only_lazily_stream(tmp_path: Path) -> None:
    async with serve(tmp_path, journal=True) as srv, aiohttp.ClientSession() as http:
        ws = await _device(http, srv.ws_url)
        first = [put("1", "alice", {"age": 30}, 100), put("2", "bob", 1, 101)]
        await ws.send_bytes(tg.encode(batch(*first, write_concern="APPLIED")))
        assert isinstance(await recv(ws), tg.OpAck)
        async with lazily.connect(f"{srv.ws_url}/lazily") as client:
            sub = await client.subscribe("map:users")
            state = await sub.wait_for(lambda s: bool(s.values))
            assert state.by_name == {"alice": {"age": 30}, "bob": 1}
            more = [put("3", "alice", {"age": 31}, 200), put("4", "bob", None, 201)]
            more.append(put("5", "carol", "x", 202))
            await ws.send_bytes(tg.encode(batch(*more, write_concern="APPLIED")))
            assert isinstance(await recv(ws), tg.OpAck)
            later = await sub.wait_for(lambda s: s.epoch > state.epoch)
            assert later.epoch == state.epoch + 1  # one delta for the batch
            assert later.by_name == {"alice": {"age": 31}, "carol": "x"}
        producer, reply = await ws_lazily(http, srv.ws_url, "map:users", publish=True)
        assert reply["type"] == "error"
        assert reply["code"] == "ForbiddenPublish"
        assert "read-only" in reply["message"]
        await producer.close()
        reader, reply = await ws_lazily(http, srv.ws_url, "map:users")
        assert reply["session_id"] == "map:users"
        snapshot = await recv_json(reader)
        assert snapshot["type"] == "snapshot"
        await reader.send_str(msgspec.json.encode(cell_set(snapshot["epoch"], 1, b"1")).decode())
        refused = await recv_json(reader)
        assert refused["type"] == "error"
        assert refused["code"] == "Forbidden"
        await reader.close()
        await ws.close()
