"""The WebSocket plumbing every client shares: bearer-token connect and orderly close."""

from __future__ import annotations

from typing import Any

import aiohttp

from octosync.errors import Unauthorized


async def connect_ws(
    http: aiohttp.ClientSession, url: str, token: str | None, **kwargs: Any
) -> aiohttp.ClientWebSocketResponse:
    """Open ``url``, presenting ``token`` as a bearer credential when there is one.

    The server checks credentials at the upgrade: a refusal (HTTP 401) is ``Unauthorized``,
    which no reconnect loop retries; other failures stay ``aiohttp.ClientError`` (retryable).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        ws: aiohttp.ClientWebSocketResponse = await http.ws_connect(url, headers=headers, **kwargs)
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status == 401:
            why = "no token was given" if token is None else "the token was refused"
            raise Unauthorized(f"{url}: {why} (HTTP 401 at the upgrade)") from None
        raise
    return ws


async def close_ws(
    ws: aiohttp.ClientWebSocketResponse | None, http: aiohttp.ClientSession | None
) -> None:
    """Close the socket before the session that owns it (either may never have opened)."""
    if ws is not None:
        await ws.close()
    if http is not None:
        await http.close()
