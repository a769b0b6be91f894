"""One stream, three lazily dialects: each subscriber gets the stream in its own dialect."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import msgspec

from octosync.ipc.messages import CellSet, Delta, Handshake, NodeSnapshot, Snapshot
from octosync.wire import json_tagged, msgpack
from tests.e2e.helpers import TIMEOUT, delta, handshake, handshake_struct, serve, snap


def hs(codec: str, session: str) -> Handshake:
    return handshake_struct(session, codec=codec)


async def test_seed_producer_fans_out_to_tagged_and_msgpack_subscribers(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        tagged = await http.ws_connect(f"{srv.ws_url}/lazily")
        await tagged.send_str(json_tagged.encode_handshake(hs("json_tagged", "d")).decode())
        reply = await asyncio.wait_for(tagged.receive(), TIMEOUT)
        assert json.loads(reply.data)["codec"] == "json_tagged"
        packed = await http.ws_connect(f"{srv.ws_url}/lazily")
        await packed.send_bytes(msgpack.encode_handshake(hs("msgpack", "d")))
        reply = await asyncio.wait_for(packed.receive(), TIMEOUT)
        assert reply.type == aiohttp.WSMsgType.BINARY
        assert msgpack.decode_handshake(reply.data).codec == "msgpack"
        prod = await http.ws_connect(f"{srv.ws_url}/lazily")
        await prod.send_str(handshake("d", publish=True).decode())
        await prod.receive()
        await prod.send_bytes(snap(0, {1: b"a"}))
        await prod.send_bytes(delta(0, 1, b"b"))
        expected = [
            Snapshot(0, (NodeSnapshot(1, "bytes", "resolved", b"a"),), roots=(1,)),
            Delta(0, 1, (CellSet(1, b"b"),)),
        ]
        got_tagged = []
        for _ in expected:
            msg = await asyncio.wait_for(tagged.receive(), TIMEOUT)
            assert msg.type == aiohttp.WSMsgType.TEXT
            assert msg.data.startswith(('{"Snapshot"', '{"Delta"'))
            got_tagged.append(json_tagged.decode(msg.data.encode()))
        got_packed = []
        for _ in expected:
            msg = await asyncio.wait_for(packed.receive(), TIMEOUT)
            assert msg.type == aiohttp.WSMsgType.BINARY
            got_packed.append(msgpack.decode(msg.data))
        assert [(type(m), m.epoch) for m in got_tagged] == [(type(m), m.epoch) for m in expected]
        assert got_packed == got_tagged
        assert isinstance(got_tagged[1], Delta)
        assert got_tagged[1].ops == expected[1].ops


async def test_a_tagged_producer_is_recognised_by_its_first_message(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        sub = await http.ws_connect(f"{srv.ws_url}/lazily")
        await sub.send_str(handshake("t").decode())
        await sub.receive()
        prod = await http.ws_connect(f"{srv.ws_url}/lazily")
        await prod.send_str(handshake("t", publish=True).decode())  # bare handshake, codec json
        await prod.receive()
        first = Snapshot(0, (NodeSnapshot(1, "bytes", "resolved", b"x"),), roots=(1,))
        await prod.send_str(json_tagged.encode(first).decode())
        got = await asyncio.wait_for(sub.receive(), TIMEOUT)
        seed = msgspec.json.decode(got.data, type=Snapshot)
        assert seed.nodes == first.nodes
        # the subscriber's write reaches the producer in the producer's (tagged) dialect
        await sub.send_bytes(delta(0, 1, b"w"))
        fwd = await asyncio.wait_for(prod.receive(), TIMEOUT)
        assert fwd.data.startswith('{"Delta"')
        assert json_tagged.decode(fwd.data.encode()) == Delta(0, 1, (CellSet(1, b"w"),))


async def test_unknown_codec_fails_closed(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_str(handshake("u", codec="bincode").decode())
        err = json.loads((await asyncio.wait_for(ws.receive(), TIMEOUT)).data)
        assert err["code"] == "HandshakeFailed"
        assert "codec" in err["message"]
