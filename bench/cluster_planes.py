"""Shared documents across a cluster: what an acknowledgement costs when it also waits for
JetStream, and how soon another node's readers see an edit.

In one run, with the same writers (``--writers`` Python ``SharedDocument`` s, each adding 1 to
one counter and setting its own register to the send time, then waiting for the
acknowledgement before the next edit):

- ``single``: one ``octosync serve`` (journal on, no cluster), every writer and one reader on it;
- ``cluster-2``: NATS (JetStream) and two ``serve --cluster`` nodes, the writers split over
  both, a reader on each node; an edit is acknowledged once its node journaled it and
  JetStream stored it.

Printed per layout: edits acknowledged per second, ack latency p50/p99, for the cluster the
latency from a write to a reader on the *other* node, the servers' CPU seconds (NATS included),
and whether every node ended with every click; ratios against ``single`` from the same run,
with the load average. Writers and readers run in this process.

    python bench/cluster_planes.py              # 8 writers, 5 s per layout
    python bench/cluster_planes.py --quick      # 4 writers, 2 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import cpu_seconds, free_port
from octosync.client.shared import SharedDocument
from octosync.links import nats_server
from octosync.links.cluster_cli import start_node

DOC = "bench-clicks"


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(urls: list[str], writers: int, seconds: float) -> dict[str, Any]:
    """Writers spread over ``urls``, one reader per URL; cross-node latency is what a reader
    sees of writers on the other URLs."""
    readers = [SharedDocument(url, DOC) for url in urls]
    docs = [SharedDocument(urls[i % len(urls)], DOC) for i in range(writers)]
    crossing: list[float] = []

    def watch(reader: int) -> None:
        for i in range(writers):
            if i % len(urls) == reader and len(urls) > 1:
                continue  # the same node's writer: not a crossing

            def seen(value: Any) -> None:
                if isinstance(value, float) and recording:
                    crossing.append(time.monotonic() - value)

            readers[reader].register(f"w{i}").on_change(seen)

    recording = False
    for doc in [*readers, *docs]:
        await doc.start()
        await doc.synced(30)
    for r in range(len(readers)):
        watch(r)
    acks: list[float] = []
    clicks = [0] * writers
    deadline = time.monotonic() + seconds
    recording = True

    async def write(i: int, doc: SharedDocument) -> None:
        while time.monotonic() < deadline:
            sent = time.monotonic()
            doc.counter("n").add(1)
            doc.register(f"w{i}").set(sent)
            await doc.synced(30)
            acks.append(time.monotonic() - sent)
            clicks[i] += 1

    await asyncio.gather(*(write(i, d) for i, d in enumerate(docs)))
    recording = False
    total = sum(clicks)
    counted = True
    for reader in readers:
        try:
            await reader.wait_until(lambda r=reader: r.counter("n").value == total, 30)
        except TimeoutError:
            counted = False
    for doc in [*docs, *readers]:
        await doc.close()
    return {
        "acks_per_s": len(acks) / seconds,
        "ack_p50": _quantile(acks, 0.5) * 1000,
        "ack_p99": _quantile(acks, 0.99) * 1000,
        "cross_p50": _quantile(crossing, 0.5) * 1000,
        "cross_p99": _quantile(crossing, 0.99) * 1000,
        "every_click": counted,
    }


def _run(layout: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if layout == "single":
            port = free_port()
            procs.append(start_node(None, "alone", port, root / "alone"))
            urls = [f"ws://127.0.0.1:{port}"]
        else:
            nats_port = free_port()
            nats = nats_server.start(root / "nats", nats_port)
            procs.append(nats)
            url = f"nats://127.0.0.1:{nats_port}"
            ports = [free_port() for _ in range(2)]
            for k, port in enumerate(ports):
                procs.append(start_node(url, f"n{k + 1}", port, root / f"n{k + 1}"))
            urls = [f"ws://127.0.0.1:{p}" for p in ports]
        before = [cpu_seconds(p.pid) for p in procs]
        result = asyncio.run(_measure(urls, args.writers, args.seconds))
        result["cpu_s"] = sum(cpu_seconds(p.pid) - b for p, b in zip(procs, before, strict=True))
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.writers, args.seconds = 4, 2.0
    load = os.getloadavg()
    print(
        f"shared documents across a cluster: {args.writers} writers, {args.seconds:g} s per "
        f"layout; load average before {load[0]:.2f} on {os.cpu_count()} cores"
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="cluster-planes-") as tmp:
        for layout in ("single", "cluster-2"):
            r = results[layout] = _run(layout, args, Path(tmp) / layout)
            cross = (
                ""
                if layout == "single"
                else f", write -> other node's reader p50 {r['cross_p50']:.1f} / "
                f"p99 {r['cross_p99']:.1f} ms"
            )
            print(
                f"{layout:<10} {r['acks_per_s']:,.0f} edits acked/s, ack p50 {r['ack_p50']:.1f}"
                f" / p99 {r['ack_p99']:.1f} ms{cross}, server CPU {r['cpu_s']:.2f} s,"
                f" every click on every node: {r['every_click']}"
            )
    one, two = results["single"], results["cluster-2"]
    print(
        f"cluster-2 / single: edits acked/s {two['acks_per_s'] / one['acks_per_s']:.2f}x, "
        f"ack p50 {two['ack_p50'] / one['ack_p50']:.2f}x; load average after "
        f"{os.getloadavg()[0]:.2f}"
    )
    if not (one["every_click"] and two["every_click"]):
        sys.exit("a node's counter is not the sum of the acknowledged clicks")


if __name__ == "__main__":
    main()
