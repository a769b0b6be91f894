"""The WebSocket plumbing every client shares: bearer-token connect and orderly close."""

from __future__ import annotations

import os
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
            reason = await _refusal_reason(http, url, headers)
            raise Unauthorized(f"{why}: {reason}" if reason else why) from None
        raise
    return ws


async def _refusal_reason(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None
) -> str | None:
    """The server's own words for a refused upgrade (``{"code", "message"}`` in the 401 body,
    which the WebSocket handshake error does not carry): asked once more with a plain GET."""
    plain = "http" + url[2:] if url.startswith("ws") else url
    try:
        timeout = aiohttp.ClientTimeout(total=5)
        async with http.get(plain, headers=headers, timeout=timeout) as resp:
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else None


async def close_ws(
    ws: aiohttp.ClientWebSocketResponse | None, http: aiohttp.ClientSession | None
) -> None:
    """Close the socket before the session that owns it (either may never have opened)."""
    if ws is not None:
        await ws.close()
    if http is not None:
        await http.close()


def failure_reason(exc: BaseException) -> str:
    """A short reason for a failed connection (``Connection refused``, not aiohttp's whole
    sentence), for one-line messages."""
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno:
        return os.strerror(exc.os_error.errno)
    return str(exc) or type(exc).__name__
