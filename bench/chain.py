"""Octoprotocol benchmark: durable chains against JetStream R3, and failover under SIGKILL.

All in one run, on loopback, with real processes (links, NATS servers):

1. Throughput, closed loop: ``--devices`` devices (in this process), each keeping at most
   ``--window`` events unacknowledged, through a 1-link and a 3-link chain (links persist in
   SQLite with ``synchronous=FULL`` before forwarding; the example game computes). Figures:
   acknowledged events/s and device-to-state latency (emit to the state update that consumed
   the event) p50/p99.
2. The same load published to a JetStream stream with 3 replicas (three clustered
   ``nats-server`` processes, file storage), ``--devices`` publishers with the same window,
   each publish awaited for its acknowledgement: acked events/s and publish-to-ack p50/p99;
   then ``--rate`` publishes/s for ``--seconds``: publish-to-ack p50/p99 at that rate.
3. Latency at a fixed rate (``--rate`` events/s over all devices, for ``--seconds``) through
   the 1-link and the 3-link chain: device-to-state p50/p99 below saturation.
4. Failover: ``--kills`` SIGKILLs of a random link of the 3-link chain under half the
   fixed-rate load, each link restarted to rejoin; time from the kill to the first state
   update that consumed an event emitted after the kill (an update already in flight at the
   kill does not count: service is back when new events are processed again), and
   acknowledged events never consumed (must be 0).

The devices share this process. By default identical state-update bytes are decoded once for
all of them and the same update is merged into the same state once (``SharedDecoding``): the
simulator's cost, not the chain's, would otherwise be measured. ``--no-share`` turns it off.

Usage::

    python bench/chain.py            # 100 devices, 5 s per throughput phase, 10 kills
    python bench/chain.py --quick    # 20 devices, 2 s per phase, 3 kills
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats

from octosync.chain.game import consumed_sequencers
from octosync.chain.records import DeviceNotice, HeadToDevice, StateUpdate
from octosync.links import nats_server
from octosync.links.cli import chain_status, start_node
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.links.shared_decoding import SharedDecoding

APP = "octosync.chain.game:compute"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Meter:
    sent: dict[tuple[str, int], float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    acked: int = 0
    recording: bool = True
    mark: float = 0.0
    """Failover: the moment of the kill (0: not measuring)."""
    restored: float = 0.0
    """Failover: when a state update first consumed an event emitted after ``mark``."""

    def listener(self, name: str) -> Any:
        def on(message: HeadToDevice) -> None:
            now = time.monotonic()
            if isinstance(message, StateUpdate):
                for d in message.consumed.get(name, ()):
                    t = self.sent.pop((name, d), None)
                    if t is not None and self.recording:
                        self.latencies.append(now - t)
                    if t is not None and self.mark and t > self.mark and not self.restored:
                        self.restored = now
            elif isinstance(message, DeviceNotice) and self.recording:
                self.acked += len(message.acked)

        return on


class Chain:
    """NATS for the configuration plus ``links`` link processes."""

    def __init__(self, root: Path, name: str, links: int, durability: str = "full") -> None:
        self.root, self.name, self.count = root, name, links
        self.durability = durability
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self) -> None:
        port = free_port()
        self.nats = nats_server.start(self.root / "nats", port)
        self.url = f"nats://127.0.0.1:{port}"
        for i in range(self.count):
            self.launch(f"n{i + 1}")

    def launch(self, node_id: str) -> None:
        proc, _ = start_node(
            self.name, node_id, self.url, APP, self.root / node_id, durability=self.durability
        )
        self.procs[node_id] = proc

    def stop(self) -> None:
        for proc in [*self.procs.values(), self.nats]:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)


async def steady(chain: Chain, links: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await chain_status(chain.name, chain.url)
        roles = [e.get("role") for e in status["links"]]
        if len(roles) == links and "joining" not in roles and None not in roles:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the chain did not form")


async def open_devices(
    chain: Chain, n: int, meter: Meter, shared: SharedDecoding | None
) -> tuple[ConfigStore, list[ChainDevice]]:
    configs = await ConfigStore(chain.url, chain.name).open()
    devices = [
        ChainDevice(f"d{i}", configs=configs, listener=meter.listener(f"d{i}"), shared=shared)
        for i in range(n)
    ]
    for d in devices:
        d.start()
        d.emit("join", json.dumps({"name": d.name}))
    deadline = time.monotonic() + 20
    while not all(d.live for d in devices) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return configs, devices


def emit(device: ChainDevice, meter: Meter, n: int) -> None:
    device.emit("move", json.dumps({"dx": 1, "dy": n % 3 - 1}))
    meter.sent[(device.name, device.client.next_sequencer - 1)] = time.monotonic()


async def closed_loop(
    devices: list[ChainDevice], meter: Meter, window: int, seconds: float
) -> None:
    n = 0
    end = time.monotonic() + seconds
    for d in devices:
        d.changed.set()
    while time.monotonic() < end:
        for d in devices:
            if not d.changed.is_set():
                continue  # nothing arrived, so its window did not open
            d.changed.clear()
            while d.live and d.unacked() < window:
                emit(d, meter, n)
                n += 1
        await asyncio.sleep(0.001)


async def open_loop(devices: list[ChainDevice], meter: Meter, rate: float, seconds: float) -> int:
    """``rate`` events/s spread over the devices, bounded by ``seconds``."""
    start = time.monotonic()
    n = 0
    while (now := time.monotonic()) < start + seconds:
        due = int((now - start) * rate)
        while n < due:
            d = devices[n % len(devices)]
            if d.live:
                emit(d, meter, n)
            n += 1
        await asyncio.sleep(0.002)
    return n


async def bench_chain(root: Path, links: int, args: argparse.Namespace) -> dict[str, float]:
    chain = Chain(root / f"chain{links}", f"b{links}", links, args.durability)
    await asyncio.to_thread(chain.start)
    try:
        await steady(chain, links)
        meter = Meter()
        shared = None if args.no_share else SharedDecoding()
        configs, devices = await open_devices(chain, args.devices, meter, shared)
        gc.freeze()  # as the links do: full collections would not rescan the start-up heap
        await closed_loop(devices, meter, args.window, 1.0)  # warm-up
        meter.latencies.clear()
        meter.acked = 0
        t0 = time.monotonic()
        await closed_loop(devices, meter, args.window, args.seconds)
        elapsed = time.monotonic() - t0
        result = {
            "events_per_s": meter.acked / elapsed,
            "p50_ms": pct(meter.latencies, 0.5) * 1000,
            "p99_ms": pct(meter.latencies, 0.99) * 1000,
        }
        await asyncio.sleep(1.0)  # the closed loop's window drains
        fixed = Meter()
        for d in devices:
            d.listener = fixed.listener(d.name)
        offered = await open_loop(devices, fixed, args.rate, args.seconds)
        await asyncio.sleep(0.5)
        result["rate"] = offered / args.seconds
        result["rate_p50_ms"] = pct(fixed.latencies, 0.5) * 1000
        result["rate_p99_ms"] = pct(fixed.latencies, 0.99) * 1000
        result["rate_measured"] = float(len(fixed.latencies))
        if links == 3:
            result.update(await failover(chain, devices, configs, args))
        if shared is not None:
            result["decoded"] = float(shared.decoded)
            result["merged"] = float(shared.merged)
        for d in devices:
            await d.stop()
        await configs.close()
        return result
    finally:
        chain.stop()


async def failover(
    chain: Chain, devices: list[ChainDevice], configs: ConfigStore, args: argparse.Namespace
) -> dict[str, float]:
    meter = Meter()
    for d in devices:
        d.listener = meter.listener(d.name)
        d.acked.clear()
    rng = random.Random(args.seed)
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            await open_loop(devices, meter, args.rate / 2, 1.0)

    task = asyncio.get_running_loop().create_task(load())
    gaps: list[float] = []
    try:
        for _ in range(args.kills):
            await asyncio.sleep(0.5)
            config, _ = await configs.read()
            victim = rng.choice(config.members)
            meter.restored = 0.0
            killed = meter.mark = time.monotonic()
            os.kill(chain.procs[victim.id].pid, signal.SIGKILL)
            chain.procs[victim.id].wait(timeout=10)
            deadline = killed + 30
            while not meter.restored and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            gaps.append((meter.restored or time.monotonic()) - killed)
            meter.mark = 0.0
            await asyncio.to_thread(chain.launch, victim.id)
            await steady(chain, 3)
    finally:
        stop.set()
        await task
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(d.live and not d.client.events for d in devices):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    state = devices[0].client.state
    lost = sum(len(d.acked - consumed_sequencers(state, d.name)) for d in devices)
    acked = sum(len(d.acked) for d in devices)
    return {
        "kills": float(len(gaps)),
        "failover_p50_ms": pct(gaps, 0.5) * 1000,
        "failover_p99_ms": pct(gaps, 0.99) * 1000,
        "failover_max_ms": max(gaps) * 1000,
        "acked_during_kills": float(acked),
        "acked_lost": float(lost),
    }


def start_jetstream_cluster(root: Path) -> tuple[list[subprocess.Popen[bytes]], list[int]]:
    clients = [free_port() for _ in range(3)]
    routes = [free_port() for _ in range(3)]
    route_urls = ",".join(f"nats://127.0.0.1:{p}" for p in routes)
    procs = []
    for i in range(3):
        store = root / f"js{i}"
        store.mkdir(parents=True, exist_ok=True)
        procs.append(
            subprocess.Popen(
                [
                    nats_server.binary(),
                    "-js",
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(clients[i]),
                    "-sd",
                    str(store),
                    "-n",
                    f"js{i}",
                    "--cluster_name",
                    "bench",
                    "--cluster",
                    f"nats://127.0.0.1:{routes[i]}",
                    "--routes",
                    route_urls,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs, clients


async def bench_jetstream(root: Path, args: argparse.Namespace) -> dict[str, float]:
    procs, ports = await asyncio.to_thread(start_jetstream_cluster, root / "jetstream")
    try:
        servers = [f"nats://127.0.0.1:{p}" for p in ports]
        deadline = time.monotonic() + 30
        while True:
            try:
                nc = await nats.connect(servers=servers, connect_timeout=1)
                js = nc.jetstream()
                await js.add_stream(
                    name="bench", subjects=["bench.>"], num_replicas=3, storage="file"
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                with contextlib.suppress(Exception):
                    await nc.close()
                await asyncio.sleep(0.5)
        latencies: list[float] = []
        acked = 0
        recording = False
        end = 0.0

        async def publisher(i: int) -> None:
            nonlocal acked
            subject = f"bench.d{i}"
            payload = json.dumps({"dx": 1, "dy": 0}).encode()
            while time.monotonic() < end:
                t = time.monotonic()
                await js.publish(subject, payload, timeout=10)
                if recording:
                    latencies.append(time.monotonic() - t)
                    acked += 1

        async def run(seconds: float) -> None:
            nonlocal end
            end = time.monotonic() + seconds
            await asyncio.gather(
                *(publisher(i) for i in range(args.devices) for _ in range(args.window))
            )

        await run(1.0)
        recording = True
        t0 = time.monotonic()
        await run(args.seconds)
        elapsed = time.monotonic() - t0
        result = {
            "events_per_s": acked / elapsed,
            "p50_ms": pct(latencies, 0.5) * 1000,
            "p99_ms": pct(latencies, 0.99) * 1000,
        }
        await asyncio.sleep(1.0)
        fixed = await jetstream_fixed_rate(js, args.rate, args.devices, args.seconds)
        result["rate_p50_ms"] = pct(fixed, 0.5) * 1000
        result["rate_p99_ms"] = pct(fixed, 0.99) * 1000
        await nc.close()
        return result
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


async def jetstream_fixed_rate(js: Any, rate: float, devices: int, seconds: float) -> list[float]:
    """``rate`` publishes/s spread over ``devices`` subjects, each timed to its acknowledgement
    (the baseline for the chains' fixed-rate latency)."""
    latencies: list[float] = []
    payload = json.dumps({"dx": 1, "dy": 0}).encode()

    async def one(i: int) -> None:
        t = time.monotonic()
        await js.publish(f"bench.d{i % devices}", payload, timeout=10)
        latencies.append(time.monotonic() - t)

    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic()
    n = 0
    while (now := time.monotonic()) < start + seconds:
        while n < int((now - start) * rate):
            tasks.append(asyncio.get_running_loop().create_task(one(n)))
            n += 1
        await asyncio.sleep(0.002)
    await asyncio.gather(*tasks)
    return latencies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--no-share",
        action="store_true",
        help="every simulated device decodes and merges each state update itself",
    )
    parser.add_argument(
        "--durability",
        choices=["full", "normal"],
        default="full",
        help="links' SQLite: full fsyncs every commit; normal survives a process crash "
        "(JetStream's file store does not fsync each message by default either)",
    )
    args = parser.parse_args()
    if args.quick:
        args.devices, args.seconds, args.kills, args.rate = 20, 2.0, 3, 400.0
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average), {os.cpu_count()} cores", flush=True)
    print(
        f"{args.devices} simulated devices in this process; "
        + (
            "each decodes and merges every state update itself (--no-share)"
            if args.no_share
            else "identical state-update bytes are decoded once and the same update is merged "
            "into the same state once for all of them (links/shared_decoding.py); each device "
            "still reads its own socket, applies the result and keeps its own events"
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="octosync-bench-chain-") as tmp:
        root = Path(tmp)
        one = await bench_chain(root, 1, args)
        print(f"chain, 1 link : {one}", flush=True)
        three = await bench_chain(root, 3, args)
        print(f"chain, 3 links: {three}", flush=True)
        js = await bench_jetstream(root, args)
        print(f"JetStream R3  : {js}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f} (1-min average)")
    print()
    print(
        f"{args.devices} devices, window {args.window}, {args.seconds:.0f} s per phase, "
        f"links' durability {args.durability}"
    )
    print("| system | acked events/s | x JetStream | p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, r in (("chain, 1 link", one), ("chain, 3 links", three), ("JetStream R3", js)):
        print(
            f"| {label} | {r['events_per_s']:,.0f} | {r['events_per_s'] / js['events_per_s']:.2f} "
            f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
        )
    ratio = three["events_per_s"] / js["events_per_s"]
    print(f"3-link chain / JetStream R3 acked throughput: {ratio:.2f}x (target >= 0.5x)")
    print(
        f"at {args.rate:,.0f} events/s offered (target: chain p99 <= 50 ms); JetStream R3 "
        f"publish-to-ack p50 {js['rate_p50_ms']:.1f} ms, p99 {js['rate_p99_ms']:.1f} ms"
    )
    for label, r in (("1-link", one), ("3-link", three)):
        print(
            f"  {label} chain, device-to-state: p50 {r['rate_p50_ms']:.1f} ms, p99 "
            f"{r['rate_p99_ms']:.1f} ms ({r['rate_p99_ms'] / js['rate_p99_ms']:.1f}x JetStream's "
            f"p99) over {r['rate_measured']:,.0f} events"
        )
    print(
        f"failover over {three['kills']:.0f} SIGKILLs, kill to first event emitted after it "
        f"consumed: p50 "
        f"{three['failover_p50_ms']:.0f} ms, p99 {three['failover_p99_ms']:.0f} ms, max "
        f"{three['failover_max_ms']:.0f} ms (target p99 < 1000 ms); acknowledged "
        f"{three['acked_during_kills']:.0f}, lost {three['acked_lost']:.0f} (must be 0)"
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
