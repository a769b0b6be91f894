"""A small pycrdt client of the ``/yjs`` face's two protocols, for the end-to-end tests."""

from __future__ import annotations

from typing import Any

import aiohttp
from pycrdt import Doc, Map, Text

from octosync.yjs import messages as m

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
