"""The WebSocket plumbing every client shares: bearer-token connect and orderly close."""

from __future__ import annotations

from typing import Any

import aiohttp


async def connect_ws(
    http: aiohttp.ClientSession, url: str, token: str | None, **kwargs: Any
) -> aiohttp.ClientWebSocketResponse:
    """Open ``url``, presenting ``token`` as a bearer credential when there is one."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    ws: aiohttp.ClientWebSocketResponse = await http.ws_connect(url, headers=headers, **kwargs)
    return ws


async def close_ws(
    ws: aiohttp.ClientWebSocketResponse | None, http: aiohttp.ClientSession | None
) -> None:
    """Close the socket before the session that owns it (either may never have opened)."""
    if ws is not None:
        await ws.close()
    if http is not None:
        await http.close()
