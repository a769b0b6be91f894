"""WVP on a Unix socket (``serve --wvp-socket``), as Echo's tools speak it: JS-ABI packets
back to back, written here by an independent CBOR encoder (cbor2), next to WebSocket peers."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest

from octosync.client.wvp import WvpClient
from octosync.errors import ListenError
from octosync.warp import graph as g
from octosync.warp.consumer import Phase, WarpProducer
from octosync.wire import wvp
from tests.e2e.helpers import TIMEOUT, serve


def packet(op: str, payload: dict[str, Any], ts: int = 1) -> bytes:
    """A JS-ABI packet the way a reference tool builds one (canonical CBOR), without
    octosync's encoder."""
    body = cbor2.dumps({"op": op, "ts": ts, "payload": payload}, canonical=True)
    header = b"JIT!" + struct.pack(">HHI", 1, 0, len(body))
    return header + body + blake3.blake3(header + body).digest()


async def read_packet(reader: asyncio.StreamReader) -> dict[str, Any]:
    header = await asyncio.wait_for(reader.readexactly(12), TIMEOUT)
    (length,) = struct.unpack(">I", header[8:])
    body = await reader.readexactly(length)
    checksum = await reader.readexactly(32)
    assert blake3.blake3(header + body).digest() == checksum
    out: dict[str, Any] = cbor2.loads(body)
    return out


async def tool(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    hello = {"capabilities": [], "client_version": 1, "agent_id": "viewer", "session_meta": None}
    writer.write(packet("handshake", hello))
    ack = await read_packet(reader)
    assert ack["op"] == "handshake_ack"
    assert ack["payload"]["status"] == "OK"
    return reader, writer


async def test_a_socket_tool_and_a_websocket_client_share_a_warp(tmp_path: Path) -> None:
    sock = tmp_path / "wvp.sock"
    async with serve(tmp_path, wvp_socket=str(sock)) as srv:
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        reader, writer = await tool(sock)
        writer.write(packet("subscribe_warp", {"warp_id": 5}))
        producer = WarpProducer()
        producer.diff([g.add_node(1, b"hi")])
        async with WvpClient(f"{srv.ws_url}/wvp") as ws_producer:
            await ws_producer.publish(5, producer.snapshot())
            await ws_producer.publish(5, producer.diff([g.add_node(2), g.add_edge(9, 1, 2)]))
            first = await read_packet(reader)
            second = await read_packet(reader)
        assert first["op"] == second["op"] == "warp_stream"
        snap = first["payload"]["frame"]["Snapshot"]
        assert snap["epoch"] == 1
        assert snap["graph"] == {
            "nodes": [{"id": 1, "kind": "Generic", "data": {"raw": [104, 105]}}],
            "edges": [],
        }
        diff = second["payload"]["frame"]["Diff"]
        assert (diff["from_epoch"], diff["to_epoch"]) == (1, 2)
        assert bytes(diff["state_hash"]) == producer.graph.state_hash()
        writer.close()


async def test_a_socket_tool_produces_for_a_following_websocket_client(tmp_path: Path) -> None:
    sock = tmp_path / "wvp.sock"
    async with (
        serve(tmp_path, wvp_socket=str(sock)) as srv,
        WvpClient(f"{srv.ws_url}/wvp") as viewer,
    ):
        view = await viewer.follow(3)
        _, writer = await tool(sock)
        graph = {"nodes": [{"id": 4, "kind": "Generic", "data": {"raw": [1, 2]}}], "edges": []}
        # the graph hashed in serde's field order; a Hash32 goes as an array of 32 u8
        h = list(blake3.blake3(cbor2.dumps(graph)).digest())
        frame = {"Snapshot": {"epoch": 0, "graph": graph, "state_hash": h}}
        writer.write(packet("warp_stream", {"warp_id": 3, "frame": frame}))
        got = await viewer.receive(TIMEOUT)
        assert isinstance(got, wvp.WarpStream)
        assert (view.phase, view.verified, list(view.graph.nodes)) == (Phase.LIVE, 1, [4])
        writer.close()


async def test_the_python_client_speaks_the_socket_and_bad_packets_close_only_that_peer(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "wvp.sock"
    async with (
        serve(tmp_path, wvp_socket=str(sock)),
        WvpClient(f"unix:{sock}") as prod,
        WvpClient(f"unix:{sock}") as view,
    ):
        await view.follow(8)
        await asyncio.sleep(0.05)
        producer = WarpProducer()
        await prod.publish(8, producer.snapshot())
        await view.receive(TIMEOUT)
        reader, _writer = await asyncio.open_unix_connection(str(sock))
        _writer.write(b"JIT?" + bytes(40))  # bad magic: a DecodeError, then closed
        err = await read_packet(reader)
        assert (err["op"], err["payload"]["name"]) == ("error", "DecodeError")
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
        await prod.publish(8, producer.diff([g.add_node(1)]))
        await view.receive(TIMEOUT)
        assert view.views[8].epoch == 1


async def test_a_live_socket_is_not_taken_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    sock = tmp_path / "wvp.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()  # the file stays, nobody listens: what a killed server leaves
    async with serve(tmp_path, wvp_socket=str(sock)):
        with pytest.raises(ListenError, match="another process serves"):
            async with serve(tmp_path / "b", wvp_socket=str(sock)):
                pass
    assert not sock.exists()
    plain = tmp_path / "file"
    plain.write_text("")
    with pytest.raises(ListenError, match="not a socket"):
        async with serve(tmp_path, wvp_socket=str(plain)):
            pass
    assert os.path.exists(plain)
