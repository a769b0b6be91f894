"""The todo list's Python side: it puts one item on the shared list, then finishes every item
whose text ends with "!" as soon as any tab adds or renames it (a helper editing beside the
people). Each field of an item is its own value: ``added``, ``text`` and ``done`` are maps keyed
by the item's id, so the helper ticking an item never undoes a rename made at the same time;
their order is the shared list ``order`` of the ids, which the pages reorder by drag."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import octosync


async def main(url: str) -> None:
    async with octosync.open_document(url, "todo") as doc:
        added, text, done = doc.map("added"), doc.map("text"), doc.map("done")
        await doc.synced()
        if "welcome" not in added.value:
            text.set("welcome", "try the list in two tabs")
            done.set("welcome", False)
            added.set("welcome", time.time_ns() // 1_000_000)
            doc.list("order").insert(0, "welcome")
        await doc.synced()
        print(f"todo list ready at {url} ({len(added.value)} items)", flush=True)

        def finish_urgent(_: Any) -> None:
            for key, item_text in text.value.items():
                urgent = key in added.value and str(item_text).endswith("!")
                if urgent and done.value.get(key) is not True:
                    done.set(key, True)

        text.on_change(finish_urgent)
        added.on_change(finish_urgent)
        await asyncio.Event().wait()  # until stopped


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="ws://127.0.0.1:8765", help="the server")
    asyncio.run(main(parser.parse_args().url))
