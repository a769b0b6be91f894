"""Small command-line tools on top of the client: watch a stream, publish a demo scoreboard."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

from octosync.client.lazily import connect
from octosync.graph import Context


async def watch(
    url: str,
    stream: str,
    *,
    token: str | None = None,
    limit: int | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Print one JSON line per mirrored state (``limit`` states, or forever)."""
    shown = 0
    async with connect(url, token=token) as client:
        sub = await client.subscribe(stream)
        async for state in sub:
            values = {str(k): v for k, v in sorted(state.values.items())}
            print(json.dumps({"epoch": state.epoch, "values": values}, default=repr), file=out)
            out.flush()
            shown += 1
            if limit is not None and shown >= limit:
                break
    return shown


async def publish_demo(
    url: str,
    stream: str,
    *,
    token: str | None = None,
    ticks: int | None = None,
    interval: float = 1.0,
) -> None:
    """Serve a tiny scoreboard (home, away, total) and score a point every ``interval``."""
    ctx = Context()
    home = ctx.cell(0, type_tag="i64")
    away = ctx.cell(0, type_tag="i64")
    ctx.memo(lambda: home.get() + away.get(), type_tag="i64")
    async with connect(url, token=token) as client:
        await client.publish(stream, ctx)
        print(f"publishing {stream!r}: node {home.id}=home {away.id}=away", flush=True)
        tick = 0
        while ticks is None or tick < ticks:
            await asyncio.sleep(interval)
            side = home if tick % 2 == 0 else away
            side.set(side.get() + 1)
            tick += 1
        await asyncio.sleep(interval)
