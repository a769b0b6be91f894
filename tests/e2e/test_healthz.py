from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
from aiohttp import web

from octosync.server.app import ServerConfig, build_app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_healthz_over_a_real_socket(tmp_path: Path) -> None:
    port = _free_port()
    runner = web.AppRunner(build_app(ServerConfig(port=port, data_dir=tmp_path)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["status"] == "ok"
    finally:
        await runner.cleanup()
