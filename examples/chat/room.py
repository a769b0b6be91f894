"""A chat room with presence: the Python side of examples/chat.

It publishes the stream ``chat`` (cells ``messages`` and ``present``) and lets every subscriber
write two cells, ``say`` and ``here``: a browser writes ``say`` to post a message and ``here``
every two seconds while its tab is open. Everything else is read-only to them. A name not heard
from for six seconds leaves ``present``.

    python examples/chat/room.py [--url ws://127.0.0.1:8765/lazily] [--token JWT]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from octosync import Context
from octosync.client import connect
from octosync.graph.changes import ChangeSet
from octosync.ipc.permissions import PeerPermissions

KEEP = 50
"""Messages the room keeps (a late joiner sees these)."""
GONE_AFTER = 6.0
"""Seconds without a ``here`` after which a name leaves ``present``."""


async def room(url: str, token: str | None) -> None:
    ctx = Context()
    messages = ctx.cell(list[dict[str, str]](), type_tag="json", name="messages")
    present = ctx.cell(list[str](), type_tag="json", name="present")
    say = ctx.cell(None, type_tag="json", name="say")  # written by browsers
    here = ctx.cell(None, type_tag="json", name="here")  # written by browsers
    readers = PeerPermissions(read=[messages.id, present.id, say.id, here.id])
    readers.grant("write", say.id, here.id)

    written: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def on_changes(changes: ChangeSet) -> None:  # inside a flush: only note what was written
        for cell in changes.cells:
            if cell.id in (say.id, here.id):
                written.put_nowait(("say" if cell.id == say.id else "here", cell.get()))

    ctx.subscribe(on_changes)
    seen: dict[str, float] = {}
    async with connect(url, token=token) as client:
        await client.publish("chat", ctx, permissions=readers)
        print(f"chat room up at {url} (stream 'chat')", flush=True)
        while True:
            try:
                kind, value = await asyncio.wait_for(written.get(), 1.0)
            except TimeoutError:
                kind, value = "tick", None
            now = time.monotonic()
            if kind == "say" and isinstance(value, dict):
                who, text = str(value.get("from", "?"))[:40], str(value.get("text", ""))[:500]
                messages.set([*messages.get(), {"from": who, "text": text}][-KEEP:])
                seen[who] = now
            elif kind == "here" and isinstance(value, dict):
                seen[str(value.get("name", "?"))[:40]] = now
            names = sorted(n for n, t in seen.items() if now - t < GONE_AFTER)
            if names != present.get():
                present.set(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/lazily")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    asyncio.run(room(args.url, args.token))


if __name__ == "__main__":
    main()
