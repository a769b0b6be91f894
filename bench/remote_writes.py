"""Writers answered by a producer on another node: one producer, writers on its node and on a
second node of a cluster, in one run.

NATS and two ``octosync serve --cluster`` nodes on loopback; the producer (octosync's Python
client, its own process) publishes a stream of ``--cells`` counters on node 1. Writers (one
process per node, ``--writers`` each, every one its own connection) ask it to set their cell,
one request at a time, each waiting for the producer's answer (``await sub.write``). Printed
per node: answered writes per second and the answer latency p50/p99, with the ratio of node 2
(crossing NATS twice) against node 1 (the producer's own node) from the same run, and the load
average. Every process is killed at the end.

    python bench/remote_writes.py                 # 8 writers per node, 5 s
    python bench/remote_writes.py --quick         # 2 writers per node, 1.5 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent / "src"))

from octosync.client.lazily import connect  # noqa: E402
from octosync.graph import Context  # noqa: E402
from octosync.links import nats_server  # noqa: E402
from octosync.links.cluster_cli import start_node  # noqa: E402

STREAM = "board"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def produce(url: str, cells: int, seconds: float) -> None:
    """Publish ``cells`` counters and serve writers' requests for ``seconds``."""
    ctx = Context()
    for i in range(cells):
        ctx.cell(0, type_tag="i64", name=f"cell/{i}")
    async with connect(url) as client:
        await client.publish(STREAM, ctx)
        print("ready", flush=True)
        await asyncio.sleep(seconds)


async def write(url: str, writers: int, cells: int, seconds: float) -> None:
    """``writers`` connections, each setting its cell as fast as it is answered."""
    async with connect(url) as client:
        subs = [await client.subscribe(STREAM) for _ in range(writers)]
        for sub in subs:
            await asyncio.wait_for(sub.wait_for(lambda s: f"cell/{cells - 1}" in s.by_name), 30)
        latencies: list[float] = []
        deadline = time.monotonic() + seconds

        async def one(i: int) -> None:
            sub, value = subs[i], 0
            while time.monotonic() < deadline:
                value += 1
                start = time.perf_counter()
                assert await sub.write(f"cell/{i % cells}", value) is True
                latencies.append(time.perf_counter() - start)

        began = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(writers)))
        took = time.monotonic() - began
    latencies.sort()

    def ms(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    row = {"writes": len(latencies), "seconds": took, "p50": ms(0.5), "p99": ms(0.99)}
    print(json.dumps(row), flush=True)


def _child(role: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), "--role", role, *args], stdout=subprocess.PIPE, text=True
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8, help="writers per node (8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of writing (5)")
    parser.add_argument("--quick", action="store_true", help="2 writers per node, 1.5 s")
    parser.add_argument("--role", choices=["producer", "writer"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.writers, args.seconds = 2, 1.5
    cells = 2 * args.writers
    if args.role == "producer":
        asyncio.run(produce(args.url, cells, args.seconds + 60))
        return 0
    if args.role == "writer":
        asyncio.run(write(args.url, args.writers, cells, args.seconds))
        return 0

    procs: list[subprocess.Popen[bytes] | subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(prefix="octosync-remote-writes-") as tmp:
        try:
            port = _free_port()
            procs.append(nats_server.start(Path(tmp) / "nats", port))
            nats = f"nats://127.0.0.1:{port}"
            urls = []
            for node in ("n1", "n2"):
                http = _free_port()
                procs.append(start_node(nats, node, http, Path(tmp) / node))
                urls.append(f"ws://127.0.0.1:{http}/lazily")
            producer = _child("producer", "--url", urls[0], "--writers", str(args.writers))
            procs.append(producer)
            assert producer.stdout is not None
            if producer.stdout.readline().strip() != "ready":
                raise RuntimeError("the producer did not start")
            common = ["--writers", str(args.writers), "--seconds", str(args.seconds)]
            writers = [_child("writer", "--url", url, *common) for url in urls]
            procs.extend(writers)
            rows = []
            for name, proc in zip(("node 1 (the producer's)", "node 2"), writers, strict=True):
                out, _ = proc.communicate(timeout=args.seconds + 120)
                if proc.returncode != 0:
                    raise RuntimeError(f"the writers on {name} failed")
                rows.append((name, json.loads(out.strip().splitlines()[-1])))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.writers} writers per node, one request")
    print("at a time each, answered by the producer on node 1")
    print(f"{'writers on':<26}{'writes/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for name, row in rows:
        rate = row["writes"] / row["seconds"]
        print(f"{name:<26}{rate:>10.0f}{row['p50']:>9.2f}{row['p99']:>9.2f}")
    local, remote = rows[0][1], rows[1][1]
    ratio = (remote["writes"] / remote["seconds"]) / (local["writes"] / local["seconds"])
    print(
        f"node 2 / node 1: throughput {ratio:.2f}x, p50 {remote['p50'] / local['p50']:.2f}x, "
        f"p99 {remote['p99'] / local['p99']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
