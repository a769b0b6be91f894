"""The counter's Python side: it adds one click a second to the counter every tab shows, as a
writer beside the people clicking (``--every 0`` adds nothing and only reports)."""

from __future__ import annotations

import argparse
import asyncio

import octosync


async def main(url: str, every: float) -> None:
    async with octosync.open_document(url, "counter") as doc:
        clicks = doc.counter("clicks")
        await doc.synced()
        print(f"counter at {url}: {clicks.value} clicks", flush=True)
        clicks.on_change(lambda n: print(f"clicks: {n}", flush=True))
        while True:
            await asyncio.sleep(every or 3600)
            if every:
                clicks.add(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="ws://127.0.0.1:8765", help="the server")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between its clicks")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.every))
