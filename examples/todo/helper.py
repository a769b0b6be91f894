"""The todo list's Python side: it puts one item on the shared list, then finishes every item
whose text ends with "!" as soon as any tab adds it (a helper editing beside the people)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import octosync


async def main(url: str) -> None:
    async with octosync.open_document(url, "todo") as doc:
        items = doc.map("items")
        await doc.synced()
        if "welcome" not in items.value:
            at = time.time_ns() // 1_000_000
            items.set("welcome", {"text": "try the list in two tabs", "done": False, "at": at})
        await doc.synced()
        print(f"todo list ready at {url} ({len(items.value)} items)", flush=True)

        def finish_urgent(all_items: dict[str, Any]) -> None:
            for key, item in all_items.items():
                if str(item.get("text", "")).endswith("!") and not item.get("done"):
                    items.set(key, {**item, "done": True})

        items.on_change(finish_urgent)
        await asyncio.Event().wait()  # until stopped


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="ws://127.0.0.1:8765", help="the server")
    asyncio.run(main(parser.parse_args().url))
