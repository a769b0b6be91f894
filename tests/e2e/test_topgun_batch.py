"""TopGun's ``BATCH`` frame over a real WebSocket: each inner message handled in order, as
alone; a frame whose framing is bad (a forged ``count``, a length that overruns, more inner
frames than the bound) refused whole with a typed error, and the server keeps serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import msgspec

from octosync.server.topgun_state import topgun_state
from octosync.store.journal import Journal
from octosync.wire import topgun as tg
from tests.e2e.helpers import serve
from tests.e2e.test_topgun_face import error_name, recv
from tests.topgun.helpers import put


def client_op(op_id: str, key: str, value: int) -> bytes:
    return tg.encode(tg.ClientOpMessage(put(op_id, key, {"n": value}, 1_000 + value)))


def error_path(msg: tg.Message) -> str:
    assert isinstance(msg, tg.Error), msg
    return str(msgspec.msgpack.decode(msg.payload.details)["path"])


async def test_a_batch_of_client_ops_is_applied_and_acked_one_by_one_and_bad_framing_refused(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, journal=True) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(tg.encode(tg.DeviceHello()))
        assert isinstance(await recv(ws), tg.DeviceAck)
        inner = [client_op("1", "a", 1), client_op("2", "b", 2), client_op("3", "c", 3)]
        inner.append(tg.encode(tg.Ping(timestamp=4)))
        await ws.send_bytes(tg.encode(tg.pack_batch(inner)))
        acks = [await recv(ws) for _ in range(3)]
        assert [a.payload.last_id for a in acks if isinstance(a, tg.OpAck)] == ["1", "2", "3"]
        pong = await recv(ws)  # after the three acks: the inner messages in order
        assert isinstance(pong, tg.Pong)
        assert pong.timestamp == 4
        users = topgun_state(srv.runtime).core.maps.live_items("users")
        assert {k: msgspec.msgpack.decode(v) for k, v in users.items()} == {
            "a": {"n": 1},
            "b": {"n": 2},
            "c": {"n": 3},
        }

        # a forged count: two frames, five declared
        forged = tg.pack_batch([client_op("4", "d", 4), client_op("5", "e", 5)])
        await ws.send_bytes(tg.encode(tg.Batch(5, forged.data)))
        refused = await recv(ws)
        assert (error_name(refused), error_path(refused)) == ("DecodeError", "count")

        # the second frame's length runs past the data: the first is not applied either
        good = client_op("6", "f", 6)
        data = len(good).to_bytes(4, "big") + good + (1000).to_bytes(4, "big") + b"\x80"
        await ws.send_bytes(tg.encode(tg.Batch(2, data)))
        refused = await recv(ws)
        assert (error_name(refused), error_path(refused)) == ("DecodeError", "data[1]")

        # 8,193 inner PINGs declared as one: over the bound, counted from the lengths
        ping = tg.encode(tg.Ping(timestamp=5))
        many = tg.pack_batch([ping] * (tg.MAX_BATCH_ITEMS + 1))
        await ws.send_bytes(tg.encode(tg.Batch(1, many.data)))
        refused = await recv(ws)
        assert (error_name(refused), error_path(refused)) == ("LimitExceeded", "data[8192]")

        await ws.send_bytes(tg.encode(tg.Ping(timestamp=6)))  # still served; no PONG 5 came
        after = await recv(ws)
        assert isinstance(after, tg.Pong)
        assert after.timestamp == 6
        assert sorted(topgun_state(srv.runtime).core.maps.live_items("users")) == ["a", "b", "c"]
        await ws.close()
    with Journal(tmp_path, readonly=True) as journal:
        assert sorted(r.key for r in journal.all_ops()) == ["a", "b", "c"]


async def test_an_inner_request_refused_is_answered_and_the_next_is_handled(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(tg.encode(tg.DeviceHello()))
        assert isinstance(await recv(ws), tg.DeviceAck)
        bad_topic = tg.encode(tg.TopicSub(tg.Topic("")))
        frames = [bad_topic, client_op("1", "a", 1), tg.encode(tg.Ping(timestamp=2))]
        await ws.send_bytes(tg.encode(tg.pack_batch(frames)))
        first = await asyncio.wait_for(recv(ws), 5)
        assert isinstance(first, tg.Error), first
        ack = await recv(ws)
        assert isinstance(ack, tg.OpAck)
        assert ack.payload.last_id == "1"
        pong = await recv(ws)
        assert isinstance(pong, tg.Pong)
        assert pong.timestamp == 2
        assert sorted(topgun_state(srv.runtime).core.maps.live_items("users")) == ["a"]
        await ws.close()
