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

With ``--held``, another comparison in one run: NATS and three nodes, ``--documents`` documents,
the clients of each node using a disjoint third of them (each document opened on its node,
``--edits`` edits each acknowledged before the next, closed), once with every node holding
every document (``[cluster] hold = "all"``) and once holding what its clients use
(``hold = "interest"``). Printed per node: documents held, RSS and its growth, CPU seconds and
CPU milliseconds per acknowledged edit; then the interest / all ratios, with the load average.

    python bench/cluster_planes.py --held --documents 3000
    python bench/cluster_planes.py --held --quick   # 300 documents
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

import aiohttp

from _harness import cpu_seconds, free_port, rss_mb
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


NODES = 3
PAYLOAD = "x" * 200
"""Each edit also sets a register of its own to about this much text, so a document grows
with its edits (an entry each)."""


async def _use_documents(urls: list[str], documents: int, edits: int) -> int:
    """Node ``k``'s clients use the documents ``i % NODES == k``: each opened, edited
    ``edits`` times (each acknowledged before the next), closed; 16 at once per node.
    Returns the edits acknowledged."""
    done = 0

    async def one(url: str, name: str) -> None:
        nonlocal done
        async with SharedDocument(url, name) as doc:
            await doc.synced(60)
            for k in range(edits):
                doc.counter("n").add(1)
                doc.register(f"t{k}").set(f"{k} {PAYLOAD}")
                await doc.synced(60)
                done += 1

    async def node(k: int) -> None:
        names = [f"doc/{i}" for i in range(documents) if i % NODES == k]
        gate = asyncio.Semaphore(16)

        async def gated(name: str) -> None:
            async with gate:
                await one(urls[k], name)

        await asyncio.gather(*(gated(n) for n in names))

    await asyncio.gather(*(node(k) for k in range(NODES)))
    return done


async def _held(port: int) -> float | None:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("octosync_cluster_documents_held "):
            return float(line.split()[1])
    return None


def _run_held(hold: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One layout of the ``--held`` comparison: per node, what it holds and what it cost."""
    procs: list[subprocess.Popen[bytes]] = []
    config = root / "octosync.toml"
    root.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[cluster]\nhold = "{hold}"\n')
    try:
        nats_port = free_port()
        procs.append(nats_server.start(root / "nats", nats_port))
        url = f"nats://127.0.0.1:{nats_port}"
        ports = [free_port() for _ in range(NODES)]
        nodes = [
            start_node(url, f"n{k + 1}", port, root / f"n{k + 1}", extra=["--config", str(config)])
            for k, port in enumerate(ports)
        ]
        procs.extend(nodes)
        rss0 = [rss_mb(p.pid) for p in nodes]
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        urls = [f"ws://127.0.0.1:{p}" for p in ports]
        edits = asyncio.run(_use_documents(urls, args.documents, args.edits))
        time.sleep(1.0)  # the other nodes take the last batches from the stream
        cpu = [cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        held = [asyncio.run(_held(port)) for port in ports]
        return {
            "edits": edits,
            "held": [args.documents if h is None else int(h) for h in held],
            "rss": [rss_mb(p.pid) for p in nodes],
            "rss_growth": [rss_mb(p.pid) - r for p, r in zip(nodes, rss0, strict=True)],
            "cpu": cpu[1:],
            "nats_cpu": cpu[0],
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def held_main(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"documents held by interest: {NODES} nodes, {args.documents} documents, a disjoint "
        f"third used on each node, {args.edits} edits each; load average before {load[0]:.2f} "
        f"on {os.cpu_count()} cores"
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="cluster-held-") as tmp:
        for hold in ("all", "interest"):
            r = results[hold] = _run_held(hold, args, Path(tmp) / hold)
            for k in range(NODES):
                print(
                    f"{hold:<8} n{k + 1}: {r['held'][k]:>6} documents held, RSS "
                    f"{r['rss'][k]:.0f} MB (+{r['rss_growth'][k]:.0f}), CPU {r['cpu'][k]:.2f} s, "
                    f"{1000 * r['cpu'][k] / max(r['edits'], 1):.3f} ms per edit"
                )
            print(f"{hold:<8} NATS CPU {r['nats_cpu']:.2f} s, {r['edits']} edits acknowledged")
    every, mine = results["all"], results["interest"]
    want = args.documents * args.edits

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    print(
        f"interest / all: RSS {mean(mine['rss']) / mean(every['rss']):.2f}x, RSS growth "
        f"{mean(mine['rss_growth']) / max(mean(every['rss_growth']), 1e-9):.2f}x, node CPU per "
        f"edit {(sum(mine['cpu']) / mine['edits']) / (sum(every['cpu']) / every['edits']):.2f}x, "
        f"documents per node {mean(mine['held']) / mean(every['held']):.2f}x; load average "
        f"after {os.getloadavg()[0]:.2f}"
    )
    if every["edits"] != want or mine["edits"] != want:
        sys.exit("not every edit was acknowledged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--held", action="store_true", help="documents held: interest vs all")
    parser.add_argument("--documents", type=int, default=3000)
    parser.add_argument("--edits", type=int, default=10)
    args = parser.parse_args()
    if args.held:
        if args.quick:
            args.documents, args.edits = 300, 2
        held_main(args)
        return
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
