from __future__ import annotations

import aiohttp
from aiohttp import web

from octosync.client.ws import close_ws, connect_ws
from tests.e2e.helpers import free_port


async def _echo_auth(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str(request.headers.get("Authorization", "<none>"))
    await ws.close()
    return ws


async def test_token_travels_as_bearer_only_when_given() -> None:
    app = web.Application()
    app.router.add_get("/ws", _echo_auth)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"ws://127.0.0.1:{port}/ws"
    try:
        seen = []
        for token in ("t0k3n", None):
            http = aiohttp.ClientSession()
            ws = await connect_ws(http, url, token)
            seen.append((await ws.receive()).data)
            await close_ws(ws, http)
            assert ws.closed
            assert http.closed
        assert seen == ["Bearer t0k3n", "<none>"]
    finally:
        await runner.cleanup()


async def test_close_tolerates_what_never_opened() -> None:
    await close_ws(None, None)
