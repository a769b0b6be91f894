"""A live dashboard fed by one producer: the Python side of examples/dashboard.

It publishes the stream ``dashboard``: this machine's load average, the producer's own memory,
a tick counter and the last minute of load as a list for a chart, updated every ``--interval``
seconds. Subscribers may read it all and write nothing.

    python examples/dashboard/producer.py [--url ws://127.0.0.1:8765/lazily] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket

from octosync import Context
from octosync.client import connect
from octosync.ipc.permissions import PeerPermissions

HISTORY = 120
"""Samples the chart keeps."""


async def produce(url: str, token: str | None, interval: float) -> None:
    ctx = Context()
    host = ctx.cell(socket.gethostname(), type_tag="string", name="host")
    load = ctx.cell(0.0, type_tag="f64", name="load")
    rss_mb = ctx.cell(0.0, type_tag="f64", name="rss_mb")
    tick = ctx.cell(0, type_tag="i64", name="tick")
    history = ctx.cell(list[float](), type_tag="json", name="history")
    peak = ctx.memo(lambda: max(history.get(), default=0.0), type_tag="f64", name="peak")
    readers = PeerPermissions(read=[n.id for n in (host, load, rss_mb, tick, history, peak)])
    async with connect(url, token=token) as client:
        publication = await client.publish("dashboard", ctx, permissions=readers)
        print(f"dashboard published at {url} (stream 'dashboard')", flush=True)
        while not publication.closed:
            with ctx.batch():  # one delta per sample
                now = os.getloadavg()[0]
                load.set(round(now, 2))
                rss_mb.set(round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
                tick.set(tick.get() + 1)
                history.set([*history.get(), round(now, 2)][-HISTORY:])
            await asyncio.sleep(interval)
        await publication.wait()  # raises the server's refusal, if that is why it ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765/lazily")
    parser.add_argument("--token", default=None)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    asyncio.run(produce(args.url, args.token, args.interval))


if __name__ == "__main__":
    main()
