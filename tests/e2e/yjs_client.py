"""A small pycrdt client of the ``/yjs`` face's two protocols, for the end-to-end tests."""

from __future__ import annotations

from typing import Any

import aiohttp
from pycrdt import Doc, Map, Text

from octosync.yjs import messages as m
from octosync.yjs.encoding import write_var_string

TIMEOUT = 10.0


async def next_body(ws: aiohttp.ClientWebSocketResponse, prefix: bytes = b"") -> bytes:
    """The next binary message (without its Hocuspocus address)."""
    msg = await ws.receive(timeout=TIMEOUT)
    assert msg.type == aiohttp.WSMsgType.BINARY, (msg.type, msg.data, msg.extra)
    data: bytes = msg.data
    assert data.startswith(prefix), data
    return data[len(prefix) :]


async def read_document(
    http: aiohttp.ClientSession, ws_url: str, name: str, token: str | None = None
) -> Doc[Any]:
    """The server's document ``name`` as a y-websocket peer with nothing gets it: one step 2."""
    query = f"?token={token}" if token else ""
    async with http.ws_connect(f"{ws_url}/yjs/{name}{query}") as ws:
        await ws.send_bytes(m.sync_step1(b"\x00"))
        doc: Doc[Any] = Doc()
        while True:
            body = await next_body(ws)
            message = m.decode_y_websocket(body)
            if isinstance(message, m.SyncStep2):
                doc.apply_update(message.update)
                return doc


def view(doc: Doc[Any]) -> dict[str, Any]:
    """What the Node peers print: Y.Text ``text`` and Y.Map ``map`` (keys sorted)."""
    text = doc.get("text", type=Text)
    mapping = doc.get("map", type=Map)
    return {"text": str(text), "map": dict(sorted(mapping.to_py().items()))}


def auth_token(address: str, token: str) -> bytes:
    """Hocuspocus's auth message for ``address``."""
    out = bytearray((m.AUTH, m.AUTH_TOKEN))
    write_var_string(out, token)
    return m.address_prefix(address) + bytes(out)


async def open_hocuspocus(ws: aiohttp.ClientWebSocketResponse, name: str, token: str = "") -> bytes:
    """Open ``name`` on a Hocuspocus socket; returns the server's answer (``Authenticated``
    with its scope, or ``PermissionDenied``) without the address."""
    await ws.send_bytes(auth_token(name, token))
    return await next_body(ws, m.address_prefix(name))


def edit(doc: Doc[Any], text: str, key: str | None = None) -> bytes:
    """Insert ``text`` at the start of ``doc``'s text (and set ``key`` in its map): the update."""
    before = doc.get_state()
    doc.get("text", type=Text).insert(0, text)
    if key is not None:
        doc.get("map", type=Map)[key] = text
    update: bytes = doc.get_update(before)
    return update
