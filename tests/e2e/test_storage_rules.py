"""Every face refuses a write up front while the data folder's disk is nearly full, over real
sockets against a real small disk (a tmpfs filled until under 1% is free): a typed error,
nothing applied, and the same writes accepted again once space returns. The rule is one module
(``store.storage_rules.DiskFree``); the faces reach it through the one commit path.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from preserves import Record, Symbol

from octosync.chain.records import DeviceEvent
from octosync.crdt.sync_messages import WireTimestamp
from octosync.errors import StorageError
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.server.auth import AuthConfig
from octosync.server.chain_face import ChainFace
from octosync.server.lazily_state import lazily_state
from octosync.server.topgun_state import topgun_state
from octosync.store.storage_rules import free_percent
from octosync.wire import DIALECTS
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th
from octosync.wire.syndicate import Assert, Error, Turn, TurnEvent, encode_packet
from tests.e2e.helpers import TIMEOUT, Running, handshake, recv_json, serve, snap
from tests.e2e.test_dataspace_face import SECRET, Raw, raw
from tests.e2e.test_topgun_face import _device, recv
from tests.store.faults import fill, small_disk
from tests.topgun.helpers import batch, put

pytestmark = pytest.mark.slow
_JSON = DIALECTS["json"]


def _leave_free(disk: Path, percent: float) -> Path:
    """Fill ``disk``, then give back space until ``percent`` of it is free (to the block)."""
    filler = fill(disk)
    fs = os.statvfs(disk)
    os.truncate(
        filler, max(filler.stat().st_size - int(fs.f_blocks * fs.f_frsize * percent / 100), 0)
    )
    return filler


async def _lazily_publish(http: aiohttp.ClientSession, srv: Running, frame: bytes) -> str:
    """A producer of stream ``s`` sends ``frame`` asking to hear when it is journaled:
    ``outbox_ack``, or the refusal's code and message."""
    ws = await http.ws_connect(f"{srv.ws_url}/lazily")
    try:
        await ws.send_str(handshake("s", publish=True, features=["publish", "outbox_ack"]).decode())
        await recv_json(ws)
        await ws.send_bytes(frame)
        doc = await recv_json(ws)
        return str(doc.get("code") or doc["type"]) + ": " + str(doc.get("message", ""))
    finally:
        await ws.close()


async def _plane_write(http: aiohttp.ClientSession, srv: Running, key: str) -> dict[str, Any]:
    """A writer of shared document ``board`` sends one op; what comes back first."""
    ws = await http.ws_connect(f"{srv.ws_url}/lazily")
    try:
        await ws.send_str(handshake("board", peer_id=5, features=[FEATURE]).decode())
        await recv_json(ws)  # the reply
        await recv_json(ws)  # the state
        op = CrdtOp(slot_id=1, stamp=WireStamp(1, 0, 5), state=b"1", key=key)
        await ws.send_bytes(_JSON.encode(CrdtSync(ops=(op,))))
        return await recv_json(ws)
    finally:
        await ws.close()


async def _topgun_write(http: aiohttp.ClientSession, srv: Running, key: str) -> tg.Message:
    ws = await _device(http, srv.ws_url)
    try:
        await ws.send_bytes(tg.encode(batch(put(key, key, "v", 1000), write_concern="PERSISTED")))
        return await recv(ws)
    finally:
        await ws.close()


async def _topgun_http(http: aiohttp.ClientSession, srv: Running, key: str) -> tuple[int, Any]:
    request = th.HttpSyncRequest(
        client_id="c",
        client_hlc=WireTimestamp(1, 0, "c"),
        operations=[put(key, key, "v", 1000)],
    )
    url = f"{srv.url}/topgun/sync"
    async with http.post(url, data=msgspec.msgpack.encode(request)) as resp:
        return resp.status, msgspec.msgpack.decode(await resp.read())


async def _assert_present(client: Raw, ds: int, who: str, handle: int) -> None:
    turn = Turn((TurnEvent(ds, Assert(Record(Symbol("Present"), [who]), handle)),))
    await client.send(encode_packet(turn))


async def test_every_face_refuses_up_front_while_the_disk_is_nearly_full(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 16) as disk:
        data = disk / "var"
        async with (
            serve(data, journal=True, dataspace_port=0, dataspace_secret=SECRET) as srv,
            aiohttp.ClientSession() as http,
            raw(srv, http, "ws") as watcher,
            raw(srv, http, "ws") as asserter,
        ):
            rt = srv.runtime
            ds = await watcher.resolved()
            mine = await asserter.resolved()
            await watcher.send(encode_packet(Turn((TurnEvent(ds, _observe()),))))
            assert await _lazily_publish(http, srv, snap(0, {1: b"a"})) == "outbox_ack: "
            chain = ChainFace("nats://127.0.0.1:1", AuthConfig())
            record = chain.journal_events(rt, "c", "dev", 99)

            filler = _leave_free(data.parent, 0.5)
            assert 0 < free_percent(data) < 1.0
            # lazily streams: the producer's frame is refused (the hub's word for a frame the
            # journal cannot take: LimitExceeded, the connection kept), the stream keeps epoch 0
            refusal = await _lazily_publish(http, srv, snap(1, {1: b"b"}))
            assert refusal.startswith("LimitExceeded: "), refusal
            assert "disk has 0." in refusal
            assert "under the 1% kept free" in refusal
            assert _epoch(rt, "s") == 0
            # shared documents: refused, nothing merged
            refused = await _plane_write(http, srv, "full/lww")
            assert refused["code"] == "StorageError", refused
            assert lazily_state(rt).plane.core.state_of("board") == ()
            # TopGun over WebSocket and HTTP: Overloaded (resend), nothing in the map
            reply = await _topgun_write(http, srv, "ws-full")
            assert isinstance(reply, tg.Error), reply
            assert msgspec.msgpack.decode(reply.payload.details)["name"] == "Overloaded"
            status, body = await _topgun_http(http, srv, "http-full")
            assert status == 503, body
            assert "Overloaded" in body["errors"][0]["message"]
            assert "kept free" in body["errors"][0]["message"]
            assert list(topgun_state(rt).core.maps.live_items("users")) == []
            # the dataspace: the turn is refused whole and the relay ends; the watcher saw none
            await _assert_present(asserter, mine, "full", 2)
            packet = await asserter.recv()
            assert isinstance(packet, Error), packet
            assert packet.detail.fields[0] == "StorageError"
            # the chain face: a device's events are refused before they are relayed
            relayed: list[bool] = []
            with pytest.raises(StorageError):
                record([DeviceEvent(1, "click", "{}")], lambda: relayed.append(True))
            assert relayed == []

            filler.unlink()  # space returns: the same writes are accepted
            assert await _lazily_publish(http, srv, snap(1, {1: b"b"})) == "outbox_ack: "
            assert _epoch(rt, "s") == 1
            echoed = await _plane_write(http, srv, "full/lww")
            assert "code" not in echoed, echoed  # the echo of its op: its acknowledgement
            assert [op.key for op in lazily_state(rt).plane.core.state_of("board")] == ["full/lww"]
            ack = await _topgun_write(http, srv, "ws-full")
            assert isinstance(ack, tg.OpAck), ack
            assert ack.payload.achieved_level == "PERSISTED"
            status, body = await _topgun_http(http, srv, "http-full")
            assert status == 200, body
            assert sorted(topgun_state(rt).core.maps.live_items("users")) == [
                "http-full",
                "ws-full",
            ]
            async with raw(srv, http, "ws") as again:
                await _assert_present(again, await again.resolved(), "back", 2)
                seen = await watcher.recv()
                assert isinstance(seen, Turn), seen
                assert [e.event.assertion for e in seen.events] == [("back",)]  # type: ignore[union-attr]
            record([DeviceEvent(1, "click", "{}")], lambda: relayed.append(True))
            async with asyncio.timeout(TIMEOUT):
                while not relayed:
                    await asyncio.sleep(0.01)


def _observe() -> Assert:
    from preserves import Embedded

    from octosync.wire.syndicate import Mine

    catch_all = Record(
        Symbol("group"),
        [
            Record(Symbol("rec"), [Symbol("Present")]),
            {0: Record(Symbol("bind"), [Record(Symbol("_"), [])])},
        ],
    )
    return Assert(Record(Symbol("Observe"), [catch_all, Embedded(Mine(5))]), 2)


def _epoch(rt: Any, stream: str) -> int:
    return int(rt.hub.epoch_of(stream))
