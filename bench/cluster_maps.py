"""TopGun maps across a cluster: LWW op batches written on one node vs spread over two.

In one run, with the same writers (``--writers`` connections, batches of ``--batch`` PUTs,
each writer on its own keys, at most ``--window`` batches in flight each):

- ``single``: one ``octosync serve`` (journal on, no cluster), every writer on it, ``APPLIED``;
- ``cluster-2 APPLIED`` and ``cluster-2 REPLICATED``: NATS (JetStream) and two
  ``serve --cluster`` nodes, the writers split over both; every op is also applied on the
  other node, and ``REPLICATED`` is acknowledged once JetStream stored it.

Printed per run: ops acknowledged per second, ack latency p50/p99, the CPU seconds of every
server process (NATS included), ops per CPU-second, for the cluster the seconds until every
node had applied every op (``octosync_cluster_maps_applied_total``) and the rate that makes
end to end, and ratios against ``single`` from the same run, with the load average. Every
process runs under ``nice -n 10`` and is killed at the end.

    python bench/cluster_maps.py               # 8 writers x batches of 100, 5 s per run
    python bench/cluster_maps.py --quick       # 4 writers, 2 s per run

With ``--held``, another comparison in one run: NATS and three nodes, ``--maps`` maps, the
clients of each node using a disjoint third of them (each map written ``--edits`` times, each
write acknowledged ``APPLIED`` before the next, by connections that each use 100 maps and
close), once with every node holding every map (``[cluster] map_hold = "all"``) and once
holding what its clients use (``map_hold = "interest"``). Printed per node: maps held, RSS and
its growth, CPU seconds and CPU milliseconds per acknowledged op; then the interest / all
ratios, with the load average.

    python bench/cluster_maps.py --held --maps 3000
    python bench/cluster_maps.py --held --quick    # 300 maps
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from octosync.links import nats_server  # noqa: E402
from octosync.links.cluster_cli import start_node  # noqa: E402

MAP = "bench"
KEYS = 1000
TICK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _applied(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("octosync_cluster_maps_applied_total "):
                return float(line.rpartition(" ")[2])
    return 0.0


def _batch(writer: str, seq: int, size: int, level: str, clock: list[int]) -> bytes:
    millis = time.time_ns() // 1_000_000
    if millis > clock[0]:
        clock[0], clock[1] = millis, 0
    ops = []
    for i in range(size):
        clock[1] += 1
        n = seq * size + i
        ops.append(
            {
                "mapName": MAP,
                "key": f"{writer}-k{n % KEYS}",
                "id": str(n + 1),
                "opType": "PUT",
                "record": {
                    "value": {"v": n},
                    "timestamp": {"millis": clock[0], "counter": clock[1], "nodeId": writer},
                },
            }
        )
    return msgspec.msgpack.encode(
        {"type": "OP_BATCH", "payload": {"ops": ops, "writeConcern": level}}
    )


async def _writer(
    url: str, name: str, level: str, seconds: float, size: int, window: int, lat: list[float]
) -> int:
    """Write for ``seconds`` with at most ``window`` batches in flight; returns ops acked."""
    decode = msgspec.msgpack.Decoder().decode
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_bytes(msgspec.msgpack.encode({"type": "DEVICE_HELLO"}))
        await ws.receive_bytes()
        sent: dict[str, float] = {}
        clock = [0, 0]
        acked = seq = 0
        deadline = time.monotonic() + seconds
        while True:
            while len(sent) < window and time.monotonic() < deadline:
                await ws.send_bytes(_batch(name, seq, size, level, clock))
                seq += 1
                sent[str(seq * size)] = time.monotonic()
            if not sent:
                return acked
            data = await asyncio.wait_for(ws.receive_bytes(), 60)
            if b"OP_ACK" not in data[:16]:
                continue  # other writers' events (a writer has the map open)
            msg = decode(data)
            at = sent.pop(msg["payload"]["lastId"], None)
            if at is not None:
                lat.append(time.monotonic() - at)
                acked += size


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def run_layout(
    nodes: int, levels: tuple[str, ...], args: argparse.Namespace
) -> list[dict[str, Any]]:
    data = Path(tempfile.mkdtemp(prefix=f"octosync-bench-maps-{nodes}-"))
    procs: list[subprocess.Popen[Any]] = []
    rows = []
    try:
        url = None
        if nodes > 1:
            nats_port = _free_port()
            procs.append(nats_server.start(data / "nats", nats_port))
            url = f"nats://127.0.0.1:{nats_port}"
        config = data / "bench.toml"
        config.write_text(  # every node applies every op: what this comparison measures
            '[server]\nmax_connections_per_address = 65536\n\n[cluster]\nmap_hold = "all"\n'
        )
        ports = []
        for i in range(nodes):
            port = _free_port()
            node = await asyncio.to_thread(
                start_node,
                url,
                f"n{i + 1}",
                port,
                data / f"n{i + 1}",
                extra=["--config", str(config)],
            )
            procs.append(node)
            ports.append(port)
        for p in procs:
            subprocess.run(["renice", "-n", "10", "-p", str(p.pid)], capture_output=True)
        for run, level in enumerate(levels):
            lat: list[float] = []
            applied0 = [_applied(p) for p in ports] if nodes > 1 else []
            cpu0 = sum(_cpu_seconds(p.pid) for p in procs)
            t0 = time.monotonic()
            per_node = [0] * nodes
            names = [f"r{run}w{i}" for i in range(args.writers)]

            urls = [f"ws://127.0.0.1:{ports[i % nodes]}/topgun" for i in range(len(names))]
            counts = await asyncio.gather(
                *(
                    _writer(u, name, level, args.seconds, args.batch, args.window, lat)
                    for u, name in zip(urls, names, strict=True)
                )
            )
            for i, n in enumerate(counts):
                per_node[i % nodes] += n
            acked_at = time.monotonic()
            total = sum(per_node)
            converged = float("nan")
            if nodes > 1:  # every node applies every op written on the others
                want = [total - per_node[i] for i in range(nodes)]
                deadline = acked_at + 120
                while time.monotonic() < deadline:
                    got = [_applied(p) - a0 for p, a0 in zip(ports, applied0, strict=True)]
                    if all(g >= w for g, w in zip(got, want, strict=True)):
                        converged = time.monotonic() - t0
                        break
                    await asyncio.sleep(0.05)
            elapsed = acked_at - t0
            cpu = sum(_cpu_seconds(p.pid) for p in procs) - cpu0
            rows.append(
                {
                    "layout": "single" if nodes == 1 else f"cluster-{nodes}",
                    "level": level,
                    "ops": total,
                    "ops_per_s": total / elapsed,
                    "p50_ms": _pct(lat, 0.5) * 1000,
                    "p99_ms": _pct(lat, 0.99) * 1000,
                    "cpu_s": cpu,
                    "ops_per_cpu_s": total / cpu if cpu else float("nan"),
                    "everywhere_s": converged,
                    "everywhere_per_s": total / converged if converged == converged else 0.0,
                    "loadavg": _loadavg(),
                }
            )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'layout':<11}{'level':<12}{'ops':>9}{'acked/s':>10}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'cpu s':>7}{'ops/cpu-s':>11}{'all nodes s':>12}{'all nodes/s':>12}  load avg"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['layout']:<11}{r['level']:<12}{r['ops']:>9}{r['ops_per_s']:>10,.0f}"
            f"{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}{r['cpu_s']:>7.1f}{r['ops_per_cpu_s']:>11,.0f}"
            f"{r['everywhere_s']:>12.2f}{r['everywhere_per_s']:>12,.0f}  {r['loadavg']}"
        )
    base = rows[0]
    for r in rows[1:]:
        print(
            f"{r['layout']} {r['level']} / single: {r['ops_per_s'] / base['ops_per_s']:.2f}x "
            f"acked ops/s, {r['ops_per_cpu_s'] / base['ops_per_cpu_s']:.2f}x ops per CPU-second, "
            f"{r['everywhere_per_s'] / base['ops_per_s']:.2f}x ops/s applied on every node"
        )


HELD_NODES = 3
PER_CONNECTION = 100
"""Maps one connection of the ``--held`` run uses before it closes (below the per-connection
bound on maps)."""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _maps_held(port: int) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("octosync_cluster_maps_held "):
                return float(line.rpartition(" ")[2])
    return None


async def _use_maps(url: str, names: list[str], edits: int) -> int:
    """Write each of ``names`` ``edits`` times, one acknowledged op at a time; returns the ops
    acknowledged."""
    decode = msgspec.msgpack.Decoder().decode
    acked = 0
    clock = [0, 0]
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_bytes(msgspec.msgpack.encode({"type": "DEVICE_HELLO"}))
        await ws.receive_bytes()
        for n, name in enumerate(names):
            for e in range(edits):
                millis = time.time_ns() // 1_000_000
                if millis > clock[0]:
                    clock[0], clock[1] = millis, 0
                clock[1] += 1
                op_id = f"{n}-{e}"
                op = {
                    "mapName": name,
                    "key": "k",
                    "id": op_id,
                    "opType": "PUT",
                    "record": {
                        "value": e,
                        "timestamp": {"millis": clock[0], "counter": clock[1], "nodeId": "b"},
                    },
                }
                await ws.send_bytes(
                    msgspec.msgpack.encode(
                        {"type": "OP_BATCH", "payload": {"ops": [op], "writeConcern": "APPLIED"}}
                    )
                )
                while True:
                    data = await asyncio.wait_for(ws.receive_bytes(), 60)
                    if b"OP_ACK" in data[:16] and decode(data)["payload"]["lastId"] == op_id:
                        acked += 1
                        break
    return acked


async def _use_all(ports: list[int], maps: int, edits: int) -> int:
    """Each node's clients use a disjoint share of the maps, four connections at a time."""
    gate = asyncio.Semaphore(4 * len(ports))
    jobs = []
    for k, port in enumerate(ports):
        mine = [f"held/{i}" for i in range(maps) if i % len(ports) == k]
        for start in range(0, len(mine), PER_CONNECTION):
            jobs.append((f"ws://127.0.0.1:{port}/topgun", mine[start : start + PER_CONNECTION]))

    async def one(url: str, names: list[str]) -> int:
        async with gate:
            return await _use_maps(url, names, edits)

    return sum(await asyncio.gather(*(one(u, n) for u, n in jobs)))


def _run_held(hold: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One layout of the ``--held`` comparison: per node, what it holds and what it cost."""
    procs: list[subprocess.Popen[Any]] = []
    root.mkdir(parents=True, exist_ok=True)
    config = root / "octosync.toml"
    config.write_text(
        f'[server]\nmax_connections_per_address = 65536\n\n[cluster]\nmap_hold = "{hold}"\n'
    )
    try:
        nats_port = _free_port()
        procs.append(nats_server.start(root / "nats", nats_port))
        url = f"nats://127.0.0.1:{nats_port}"
        ports = [_free_port() for _ in range(HELD_NODES)]
        nodes = [
            start_node(url, f"n{k + 1}", port, root / f"n{k + 1}", extra=["--config", str(config)])
            for k, port in enumerate(ports)
        ]
        procs.extend(nodes)
        rss0 = [_rss_mb(p.pid) for p in nodes]
        cpu0 = [_cpu_seconds(p.pid) for p in procs]
        ops = asyncio.run(_use_all(ports, args.maps, args.edits))
        time.sleep(1.0)  # the other nodes take the last batches from the stream
        cpu = [_cpu_seconds(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        held = [_maps_held(port) for port in ports]
        return {
            "ops": ops,
            "held": [args.maps if h is None else int(h) for h in held],
            "rss": [_rss_mb(p.pid) for p in nodes],
            "rss_growth": [_rss_mb(p.pid) - r for p, r in zip(nodes, rss0, strict=True)],
            "cpu": cpu[1:],
            "nats_cpu": cpu[0],
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)


def held_main(args: argparse.Namespace) -> int:
    print(
        f"maps held by interest: {HELD_NODES} nodes, {args.maps} maps, a disjoint third used "
        f"on each node, {args.edits} writes each; load average before {_loadavg()} on "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="cluster-held-maps-") as tmp:
        for hold in ("all", "interest"):
            r = results[hold] = _run_held(hold, args, Path(tmp) / hold)
            for k in range(HELD_NODES):
                print(
                    f"{hold:<8} n{k + 1}: {r['held'][k]:>6} maps held, RSS {r['rss'][k]:.0f} MB "
                    f"(+{r['rss_growth'][k]:.0f}), CPU {r['cpu'][k]:.2f} s, "
                    f"{1000 * r['cpu'][k] / max(r['ops'], 1):.3f} ms per op"
                )
            print(f"{hold:<8} NATS CPU {r['nats_cpu']:.2f} s, {r['ops']} ops acknowledged")
    every, mine = results["all"], results["interest"]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    print(
        f"interest / all: RSS {mean(mine['rss']) / mean(every['rss']):.2f}x, RSS growth "
        f"{mean(mine['rss_growth']) / max(mean(every['rss_growth']), 1e-9):.2f}x, node CPU per "
        f"op {(sum(mine['cpu']) / mine['ops']) / (sum(every['cpu']) / every['ops']):.2f}x, "
        f"maps per node {mean(mine['held']) / mean(every['held']):.2f}x; load average after "
        f"{_loadavg()}"
    )
    want = args.maps * args.edits
    if every["ops"] != want or mine["ops"] != want:
        print("not every op was acknowledged", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8, help="writer connections (8)")
    parser.add_argument("--batch", type=int, default=100, help="ops per batch (100)")
    parser.add_argument("--window", type=int, default=4, help="batches in flight per writer (4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per run (5)")
    parser.add_argument("--quick", action="store_true", help="4 writers, 2 s per run")
    parser.add_argument("--held", action="store_true", help="maps held: interest vs all")
    parser.add_argument("--maps", type=int, default=3000, help="maps of the --held run (3000)")
    parser.add_argument("--edits", type=int, default=10, help="writes per map, --held (10)")
    args = parser.parse_args(argv)
    if args.held:
        if args.quick:
            args.maps, args.edits = 300, 2
        return held_main(args)
    if args.quick:
        args.writers, args.seconds = 4, 2.0
    print(f"load average before: {_loadavg()} ({os.cpu_count()} CPUs)", flush=True)
    rows = asyncio.run(run_layout(1, ("APPLIED",), args))
    rows += asyncio.run(run_layout(2, ("APPLIED", "REPLICATED"), args))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
