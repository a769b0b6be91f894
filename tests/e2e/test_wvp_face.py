"""/wvp over real loopback WebSockets: JS-ABI packets carrying canonical CBOR."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import aiohttp

from octosync.wire import jsabi, wvp
from tests.e2e.helpers import TIMEOUT, serve


async def connect(http: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(f"{url}/wvp", max_msg_size=0)
    await ws.send_bytes(wvp.encode(wvp.Handshake(capabilities=(), client_version=1), 0))
    ack, _ = await recv(ws)
    assert isinstance(ack, wvp.HandshakeAck)
    assert ack.status == "OK"
    return ws


async def recv(ws: aiohttp.ClientWebSocketResponse) -> tuple[wvp.Message, int]:
    msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
    assert msg.type == aiohttp.WSMsgType.BINARY, msg
    return wvp.decode(msg.data)


def stream(wid: int, frame: wvp.WarpSnapshot | wvp.WarpDiff, ts: int = 1) -> bytes:
    return wvp.encode(wvp.WarpStream(wid, frame), ts)


async def test_two_subscribers_one_producer_late_joiner_and_ts(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        subs = [await connect(http, srv.ws_url) for _ in range(2)]
        for s in subs:
            await s.send_bytes(wvp.encode(wvp.SubscribeWarp(warp_id=9), 0))
        prod = await connect(http, srv.ws_url)
        await prod.send_bytes(stream(9, wvp.WarpSnapshot(epoch=0, graph={"nodes": [1]})))
        for e in range(3):
            await prod.send_bytes(stream(9, wvp.WarpDiff(e, e + 1, [{"set": e}])))
        for s in subs:
            got = [await recv(s) for _ in range(4)]
            frames = [m.frame for m, _ in got if isinstance(m, wvp.WarpStream)]
            assert [type(f).__name__ for f in frames] == ["WarpSnapshot", *["WarpDiff"] * 3]
            stamps = [ts for _, ts in got]
            assert stamps == sorted(stamps)
            assert len(set(stamps)) == 4
        late = await connect(http, srv.ws_url)
        await late.send_bytes(wvp.encode(wvp.SubscribeWarp(warp_id=9), 0))
        replay = [(await recv(late))[0] for _ in range(4)]
        assert [m.frame for m in replay if isinstance(m, wvp.WarpStream)] == [
            wvp.WarpSnapshot(epoch=0, graph={"nodes": [1]}),
            *[wvp.WarpDiff(e, e + 1, [{"set": e}]) for e in range(3)],
        ]


async def test_authority_gap_and_snapshot_required(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        owner = await connect(http, srv.ws_url)
        other = await connect(http, srv.ws_url)
        await owner.send_bytes(stream(1, wvp.WarpDiff(0, 1, [])))
        err, _ = await recv(owner)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "SnapshotRequired"
        await owner.send_bytes(stream(1, wvp.WarpSnapshot(epoch=5, graph=None)))
        await other.send_bytes(stream(1, wvp.WarpSnapshot(epoch=0, graph="mine")))
        err, _ = await recv(other)
        assert isinstance(err, wvp.ErrorPayload)
        assert (err.name, err.code) == ("ForbiddenPublish", 10)
        await owner.send_bytes(stream(1, wvp.WarpDiff(5, 7, [])))
        err, _ = await recv(owner)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "EpochGap"
        # legacy op names are accepted on input
        from octosync.wire import cbor

        legacy = {"op": "subscribe_rmg", "ts": 3, "payload": {"rmg_id": 1}}
        await other.send_bytes(jsabi.encode_packet(cbor.encode(legacy)))
        snap, _ = await recv(other)
        assert isinstance(snap, wvp.WarpStream)
        assert snap.frame == wvp.WarpSnapshot(epoch=5, graph=None)


async def test_bad_packets_get_typed_errors_others_keep_working(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod = await connect(http, srv.ws_url)
        sub = await connect(http, srv.ws_url)
        await sub.send_bytes(wvp.encode(wvp.SubscribeWarp(warp_id=4), 0))
        await prod.send_bytes(stream(4, wvp.WarpSnapshot(epoch=0, graph=1)))
        await recv(sub)
        bad = await connect(http, srv.ws_url)
        pkt = bytearray(wvp.encode(wvp.SubscribeWarp(warp_id=4), 0))
        pkt[-1] ^= 0xFF
        await bad.send_bytes(bytes(pkt))
        err, _ = await recv(bad)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "DecodeError"
        assert "checksum" in err.message
        await bad.send_bytes(b"JIT?" + bytes(40))
        err, _ = await recv(bad)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "DecodeError"
        huge = b"JIT!" + struct.pack(">HHI", 1, 0, jsabi.MAX_PAYLOAD + 1)
        await bad.send_bytes(huge)
        err, _ = await recv(bad)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "Oversize"
        closed = await asyncio.wait_for(bad.receive(), TIMEOUT)
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await prod.send_bytes(stream(4, wvp.WarpDiff(0, 1, "ok")))
        msg, _ = await recv(sub)
        assert isinstance(msg, wvp.WarpStream)
        assert msg.frame == wvp.WarpDiff(0, 1, "ok")


async def test_handshake_first(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/wvp")
        await ws.send_bytes(wvp.encode(wvp.SubscribeWarp(warp_id=1), 0))
        err, _ = await recv(ws)
        assert isinstance(err, wvp.ErrorPayload)
        assert err.name == "HandshakeFailed"


async def test_notifications_reach_warp_subscribers(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        a = await connect(http, srv.ws_url)
        b = await connect(http, srv.ws_url)
        await b.send_bytes(wvp.encode(wvp.SubscribeWarp(warp_id=2), 0))
        note = wvp.Notification(kind="Warn", scope={"Warp": 2}, title="hi")
        await asyncio.sleep(0.05)
        await a.send_bytes(wvp.encode(note, 0))
        got, _ = await recv(b)
        assert got == note
