"""Small command-line tools on top of the client: watch a stream, publish a demo scoreboard.

Both raise what went wrong (a typed ``OctosyncError`` from the server, or the connection
error) instead of printing it, so the command line can say it in one line.
"""

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
    err: TextIO = sys.stderr,
) -> int:
    """Print one JSON line per mirrored state (``limit`` states, or forever)."""
    shown = 0
    async with connect(url, token=token) as client:
        sub = await client.subscribe(stream)
        print(f"watching {stream!r} at {url} (Ctrl-C to stop)", file=err, flush=True)
        async for state in sub:
            line: dict[str, object] = {
                "epoch": state.epoch,
                "values": {str(k): v for k, v in sorted(state.values.items())},
            }
            if state.names:
                line["by_name"] = state.by_name
            print(json.dumps(line, default=repr), file=out)
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
    """Serve a tiny scoreboard (home, away, total) and score a point every ``interval``.

    Returns after ``ticks`` points; raises the server's refusal (``ForbiddenPublish``,
    ``Forbidden``, ``Unauthorized``) as soon as it comes.
    """
    ctx = Context()
    home = ctx.cell(0, type_tag="i64", name="home")
    away = ctx.cell(0, type_tag="i64", name="away")
    ctx.memo(lambda: home.get() + away.get(), type_tag="i64", name="total")
    async with connect(url, token=token) as client:
        pub = await client.publish(stream, ctx)
        print(f"publishing {stream!r}: node {home.id}=home {away.id}=away", flush=True)
        tick = 0
        while ticks is None or tick <= ticks:
            try:
                await asyncio.wait_for(pub.wait(), interval)  # returns only if it ended
                return
            except TimeoutError:
                pass
            if ticks is not None and tick == ticks:
                return
            side = home if tick % 2 == 0 else away
            side.set(side.get() + 1)
            tick += 1
