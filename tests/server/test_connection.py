"""The shared WebSocket loop over real sockets: keepalive, and nothing kept after a close."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.e2e.helpers import serve, ws_lazily


def server_sockets() -> int:
    gc.collect()
    return sum(isinstance(o, web.WebSocketResponse) for o in gc.get_objects())


async def test_connections_closed_for_an_oversize_frame_are_not_kept_in_memory(
    tmp_path: Path,
) -> None:
    """The peer's close reply arrives after the server closed; nothing may re-arm a timer that
    keeps the closed connection alive (aiohttp's own heartbeat did, for 30 s and more)."""
    limit = 4096
    async with serve(tmp_path, max_frame_size=limit) as srv, aiohttp.ClientSession() as http:
        before = server_sockets()
        for i in range(20):
            ws, _ = await ws_lazily(http, srv.ws_url, f"s{i}", publish=True)
            await ws.send_bytes(b"x" * (limit + 2))
            reply = await asyncio.wait_for(ws.receive(), 5)
            assert json.loads(reply.data)["code"] == "Oversize"
            closed = await asyncio.wait_for(ws.receive(), 5)
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            await ws.close()
        for _ in range(50):  # bounded: the server's side finishes its close within 1 s
            if server_sockets() <= before:
                break
            await asyncio.sleep(0.02)
        assert server_sockets() <= before


async def test_a_silent_peer_is_pinged_then_dropped(tmp_path: Path) -> None:
    async with serve(tmp_path, heartbeat=0.2) as srv, aiohttp.ClientSession() as http:
        ws, _ = await ws_lazily(http, srv.ws_url, "quiet", autoping=False)
        loop = asyncio.get_running_loop()
        start = loop.time()
        ping = await asyncio.wait_for(ws.receive(), 5)
        assert ping.type == aiohttp.WSMsgType.PING  # not answered
        end = await asyncio.wait_for(ws.receive(), 5)
        assert end.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert 0.3 <= loop.time() - start < 3.0


async def test_a_peer_that_answers_pings_stays(tmp_path: Path) -> None:
    async with serve(tmp_path, heartbeat=0.1) as srv, aiohttp.ClientSession() as http:
        ws, _ = await ws_lazily(http, srv.ws_url, "alive")  # aiohttp answers pings itself
        receiving = asyncio.ensure_future(ws.receive())  # answers pings while it waits
        done, _ = await asyncio.wait({receiving}, timeout=0.8)
        assert not done, "the server closed a peer that answered its pings"
        assert len(srv.runtime.links) == 1
        receiving.cancel()
        await ws.close()
