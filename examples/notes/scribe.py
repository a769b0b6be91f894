"""The notes example's Python side: a replica of the shared text that greets an empty page and
prints how long the notes are as everyone types.

    python examples/notes/scribe.py [--url ws://127.0.0.1:8765]
"""

from __future__ import annotations

import argparse
import asyncio

import octosync


async def main(url: str) -> None:
    async with octosync.open_document(url, "notes") as doc:
        await doc.synced()
        body = doc.text("body")
        if not body.value:
            body.insert(0, "Shared notes: type in any tab.\n")
        await doc.synced()
        print("notes ready", flush=True)
        body.on_change(lambda edits: print(f"{len(body)} characters", flush=True))
        await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="the notes example's Python side")
    ap.add_argument("--url", default="ws://127.0.0.1:8765")
    asyncio.run(main(ap.parse_args().url))
