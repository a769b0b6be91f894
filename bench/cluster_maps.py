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
        config.write_text("[server]\nmax_connections_per_address = 65536\n")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8, help="writer connections (8)")
    parser.add_argument("--batch", type=int, default=100, help="ops per batch (100)")
    parser.add_argument("--window", type=int, default=4, help="batches in flight per writer (4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per run (5)")
    parser.add_argument("--quick", action="store_true", help="4 writers, 2 s per run")
    args = parser.parse_args(argv)
    if args.quick:
        args.writers, args.seconds = 4, 2.0
    print(f"load average before: {_loadavg()} ({os.cpu_count()} CPUs)", flush=True)
    rows = asyncio.run(run_layout(1, ("APPLIED",), args))
    rows += asyncio.run(run_layout(2, ("APPLIED", "REPLICATED"), args))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
