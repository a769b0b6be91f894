"""Cluster benchmark: one producer, subscribers on one node vs split across nodes over NATS.

In one run, each layout with the same load (``bench/fanout.py``'s producer and raw subscriber
processes, the same delta bytes, at most ``--window`` deltas in flight as counted by the
slowest subscriber process):

- ``single``: one ``octosync serve`` (no cluster, no NATS), every subscriber on it;
- ``cluster-2``: NATS and two ``serve --cluster`` nodes; the producer on node 1, the subscriber
  processes (the same ``--procs`` in every layout) split evenly over nodes 1 and 2;
- ``cluster-3``: the same over three nodes.

Printed per layout: deltas delivered per second, latency p50/p99 (send to receipt, one
monotonic clock), the CPU seconds of every server process (NATS included), deltas per
CPU-second, and the ratios against ``single`` from the same run, with the load average.
Every process runs under ``nice -n 10``; all of them are killed at the end.

    python bench/cluster.py                    # 600 subscribers, 5 s per layout
    python bench/cluster.py --subscribers 2000 --seconds 10
    python bench/cluster.py --quick            # 60 subscribers, 2 s
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

import fanout  # noqa: E402  (the sibling benchmark's producer and subscribers)
from octosync.links import nats_server  # noqa: E402
from octosync.links.cluster_cli import start_node  # noqa: E402

NICE = ["nice", "-n", "10"]


def _config(data: Path) -> Path:
    """Room for every subscriber from one loopback address (as bench/fanout.py does)."""
    path = data / "bench.toml"
    path.write_text("[server]\nmax_connections_per_address = 65536\n")
    return path


def _cluster_counters(port: int) -> dict[str, float]:
    """The node's ``octosync_cluster_*`` and reset counters from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("octosync_cluster_", "octosync_resets", "octosync_rejected")):
            name, _, value = line.rpartition(" ")
            if "lag" not in name:
                out[name.removeprefix("octosync_").removesuffix("_total")] = float(value)
    return out


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def run_layout(
    name: str,
    nodes: int,
    clustered: bool,
    subscribers: int,
    seconds: float,
    window: int,
    sub_procs: int,
) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix=f"octosync-bench-{name}-"))
    procs: list[subprocess.Popen[Any]] = []
    subs: list[subprocess.Popen[str]] = []
    fd, progress_path = tempfile.mkstemp(prefix="octosync-cluster-bench-")
    os.close(fd)
    progress = fanout.Progress(progress_path, sub_procs, create=True)
    try:
        url = None
        if clustered:
            nats_port = fanout._free_port()
            procs.append(nats_server.start(data / "nats", nats_port))
            url = f"nats://127.0.0.1:{nats_port}"
        ports = []
        extra = ["--no-journal", "--config", str(_config(data))]
        for i in range(nodes):
            port = fanout._free_port()
            node = await asyncio.to_thread(
                start_node, url, f"n{i + 1}", port, data / f"n{i + 1}", extra=extra
            )
            procs.append(node)
            ports.append(port)
        for p in procs:
            subprocess.run(["renice", "-n", "10", "-p", str(p.pid)], capture_output=True)
        # The same subscriber processes in every layout, spread evenly over the nodes.
        share = [
            subscribers // sub_procs + (1 if i < subscribers % sub_procs else 0)
            for i in range(sub_procs)
        ]
        for slot, n in enumerate(share):
            port = ports[slot % nodes]
            argv = [sys.executable, str(HERE.parent / "fanout.py"), "_subs", "octosync"]
            argv += [str(port), str(n), str(seconds), progress_path, str(slot), str(sub_procs)]
            subs.append(
                subprocess.Popen(
                    NICE + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
            )
        loop = asyncio.get_running_loop()
        for p in subs:
            assert p.stdout is not None
            line = await asyncio.wait_for(loop.run_in_executor(None, p.stdout.readline), 120)
            if not line.startswith("READY"):
                raise RuntimeError(f"a subscriber process failed to connect: {line!r}")
        cpu0 = sum(fanout._cpu_ticks(p.pid) for p in procs)
        for p in subs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        t0 = time.monotonic()
        sent = await fanout._produce("octosync", ports[0], seconds, window, progress)
        await asyncio.sleep(1.0)
        elapsed = time.monotonic() - t0
        cpu = (sum(fanout._cpu_ticks(p.pid) for p in procs) - cpu0) / fanout.TICK
        counters = [_cluster_counters(port) for port in ports]
        deltas = 0
        latencies: list[float] = []
        for p in subs:
            out, _ = await asyncio.wait_for(loop.run_in_executor(None, p.communicate), 60)
            result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT"))[7:])
            deltas += result["deltas"]
            arr = array("d")
            arr.frombytes(base64.b64decode(result["latencies"]))
            latencies.extend(arr)
        latencies.sort()
        return {
            "layout": name,
            "subscribers": subscribers,
            "sent": sent,
            "deltas_per_s": deltas / seconds,
            "p50_ms": fanout._pct(latencies, 0.50) * 1000,
            "p99_ms": fanout._pct(latencies, 0.99) * 1000,
            "cpu_s": cpu,
            "deltas_per_cpu_s": deltas / cpu if cpu else float("nan"),
            "elapsed_s": elapsed,
            "loadavg": _loadavg(),
            "nodes": counters,
        }
    finally:
        progress.close()
        Path(progress_path).unlink(missing_ok=True)
        for p in [*subs, *procs]:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'layout':<11}{'subs':>6}{'sent':>9}{'deltas/s':>12}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'cpu s':>7}{'deltas/cpu-s':>14}  load avg"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['layout']:<11}{r['subscribers']:>6}{r['sent']:>9}{r['deltas_per_s']:>12,.0f}"
            f"{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}{r['cpu_s']:>7.1f}"
            f"{r['deltas_per_cpu_s']:>14,.0f}  {r['loadavg']}"
        )
    base = next((r for r in rows if r["layout"] == "single"), None)
    if base is None or not base["deltas_per_s"]:
        return
    for r in rows:
        if r is base:
            continue
        print(
            f"{r['layout']} / single: {r['deltas_per_s'] / base['deltas_per_s']:.2f}x deltas/s, "
            f"{r['deltas_per_cpu_s'] / base['deltas_per_cpu_s']:.2f}x deltas per CPU-second, "
            f"p99 {r['p99_ms'] - base['p99_ms']:+.1f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=600, help="subscribers in all (600)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per layout (5)")
    parser.add_argument("--window", type=int, default=16, help="deltas in flight (16)")
    parser.add_argument(
        "--procs", type=int, default=6, help="subscriber processes, in every layout (6)"
    )
    parser.add_argument("--quick", action="store_true", help="60 subscribers, 2 s per layout")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.subscribers, args.seconds, args.procs = 60, 2.0, 6
    print(f"load average before: {_loadavg()} ({os.cpu_count()} CPUs)", flush=True)
    rows = []
    for name, nodes, clustered in (
        ("single", 1, False),
        ("cluster-2", 2, True),
        ("cluster-3", 3, True),
    ):
        rows.append(
            asyncio.run(
                run_layout(
                    name,
                    nodes,
                    clustered,
                    args.subscribers,
                    args.seconds,
                    args.window,
                    args.procs,
                )
            )
        )
    print_table(rows)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
