"""The editor example's Python side: a pycrdt peer of the document the Tiptap tabs edit.

It opens the document over y-websocket's protocol (``/yjs/NAME``), writes a welcome paragraph
into Tiptap's fragment when the document is empty, then stays and prints the document's word
count whenever an edit arrives: the server's documents are plain Yjs, readable from Python.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

import aiohttp
from pycrdt import Doc, XmlElement, XmlFragment, XmlText

from octosync.yjs import messages as m


def words(doc: Doc[Any]) -> int:
    fragment = doc.get("default", type=XmlFragment)  # Tiptap's Collaboration field
    return len(re.sub(r"<[^>]*>", " ", str(fragment)).split())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/yjs")
    parser.add_argument("--doc", default="editor")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    query = f"?token={args.token}" if args.token else ""
    doc: Doc[Any] = Doc()
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{args.url}/{args.doc}{query}") as ws,
    ):
        await ws.send_bytes(m.sync_step1(doc.get_state()))  # "send me the document"
        while True:  # the server's own step 1 comes first; its step 2 answers ours
            answer = m.decode_y_websocket(await ws.receive_bytes())
            if isinstance(answer, m.SyncStep1):
                await ws.send_bytes(m.sync_step2(doc.get_update(answer.state_vector)))
            elif isinstance(answer, m.SyncStep2):
                doc.apply_update(answer.update)
                break
        fragment = doc.get("default", type=XmlFragment)
        if not fragment.children:
            before = doc.get_state()
            welcome = "Welcome: type here, and in another tab."
            fragment.children.append(XmlElement("paragraph", contents=[XmlText(welcome)]))
            await ws.send_bytes(m.sync_update(doc.get_update(before)))
        print(f"editor document {args.doc!r} ready at {args.url}/{args.doc}", flush=True)
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            message = m.decode_y_websocket(msg.data)
            if isinstance(message, m.SyncUpdate | m.SyncStep2):
                doc.apply_update(message.update)
                print(f"{words(doc)} words", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
