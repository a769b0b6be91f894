"""Small command-line tools on top of the client: watch a stream, publish a demo scoreboard.

Both raise what went wrong (a typed ``OctosyncError`` from the server, or the connection
error) instead of printing it, so the command line can say it in one line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from octosync.client.lazily import Backoff, Client, State, connect
from octosync.client.ws import failure_reason
from octosync.errors import NothingPublished
from octosync.graph import Context

DEFAULT_RETRIES = 10
"""Reconnect attempts after the server is lost, before a tool gives up (and says so)."""


def _client(url: str, token: str | None, retries: int | None, err: TextIO, tool: str) -> Client:
    """A client that says, on ``err``, each time it retries a lost server, and gives up after
    ``retries`` attempts (None: never)."""

    def retrying(attempt: int, limit: int | None, why: BaseException) -> None:
        of = "" if limit is None else f" of {limit}"
        print(
            f"octosync {tool}: lost the server at {url} ({failure_reason(why)}); "
            f"reconnecting (attempt {attempt}{of})",
            file=err,
            flush=True,
        )

    return connect(url, token=token, backoff=Backoff(max_attempts=retries), on_retry=retrying)


async def watch(
    url: str,
    stream: str,
    *,
    token: str | None = None,
    limit: int | None = None,
    wait: float | None = 10.0,
    retries: int | None = DEFAULT_RETRIES,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Print one JSON line per mirrored state (``limit`` states, or forever).

    Raises ``NothingPublished`` when no state comes within ``wait`` seconds (nobody publishes
    the stream: a subscriber of an unknown stream simply waits), and ``ConnectionError`` once
    ``retries`` reconnects in a row failed.
    """
    shown = 0
    async with _client(url, token, retries, err, "watch") as client:
        sub = await client.subscribe(stream)
        print(f"watching {stream!r} at {url} (Ctrl-C to stop)", file=err, flush=True)
        states = aiter(sub)
        try:
            first = await asyncio.wait_for(anext(states), wait)
        except TimeoutError:
            raise NothingPublished(
                f"no state of {stream!r} at {url} within {wait:g}s: nobody publishes it there "
                f"(octosync publish-demo {stream} starts a producer; --wait 0 waits forever)"
            ) from None
        except StopAsyncIteration:
            first = None

        async def following() -> AsyncIterator[State]:
            if first is not None:
                yield first
                async for state in states:
                    yield state

        async for state in following():
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
                return shown
        if sub.failed is not None:
            raise sub.failed
        if isinstance(sub.lost, ConnectionError):
            raise sub.lost
    return shown


async def publish_demo(
    url: str,
    stream: str,
    *,
    token: str | None = None,
    ticks: int | None = None,
    interval: float = 1.0,
    retries: int | None = DEFAULT_RETRIES,
    err: TextIO = sys.stderr,
) -> None:
    """Serve a tiny scoreboard (home, away, total) and score a point every ``interval``.

    Returns after ``ticks`` points; raises the server's refusal (``ForbiddenPublish``,
    ``Forbidden``, ``Unauthorized``) as soon as it comes.
    """
    ctx = Context()
    home = ctx.cell(0, type_tag="i64", name="home")
    away = ctx.cell(0, type_tag="i64", name="away")
    total = ctx.memo(lambda: home.get() + away.get(), type_tag="i64", name="total")
    async with _client(url, token, retries, err, "publish-demo") as client:
        pub = await client.publish(stream, ctx)
        print(
            f"publishing {stream!r}: node {home.id}=home {away.id}=away {total.id}=total",
            flush=True,
        )
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
