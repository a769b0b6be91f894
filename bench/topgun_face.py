"""TopGun face benchmark: protocol clients writing LWW batches to ``/topgun``, subscribers
receiving the events, and the same ops folded in-process by ``crdt/`` (the ceiling).

The octosync server runs in its own process (the real serving path: ``build_app`` with the
journal on, ``--insecure-dev`` so clients send ``DEVICE_HELLO``). Subscribers (``--subscribers``,
default 100) run in a second process: each opens the map with ``SYNC_INIT`` and counts the
events it receives (scanning the MsgPack headers, so the harness stays cheap). This process
runs the writers (``--writers``, default 10): each sends ``OP_BATCH`` frames of ``--batch``
(100) PUTs over 1,000 keys with fresh HLC timestamps, at most ``--window`` batches in flight,
for ``--seconds`` per write concern (``APPLIED``, then ``PERSISTED``), and times each
batch's ``OP_ACK``. Usage::

    python bench/topgun_face.py             # 10 writers, 100 subscribers, 5 s per level
    python bench/topgun_face.py --quick     # 4 writers, 20 subscribers, 2 s per level
    python bench/topgun_face.py --baseline-src ../main/src   # before / after, same run

``OCTOSYNC_BENCH_PROFILE=FILE`` writes a cProfile of the serving process to ``FILE``.

Published figure for comparison: TopGun reports 483,000 ops/s fire-and-forget in-process on
an M1 Max (not measured here).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import msgspec

HERE = Path(__file__).resolve()
MAP = "bench"
KEYS = 1000
_EVENTS = re.compile(rb"\xa6events(?:\xdc(..)|([\x90-\x9f]))|(\xacSERVER_EVENT)", re.DOTALL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _serve(port: int, data: str) -> None:
    from octosync.server.app import ServerConfig, build_app
    from octosync.server.run import start

    config = ServerConfig(
        port=port,
        data_dir=Path(data),
        insecure_dev=True,
        journal=True,
        max_connections_per_address=1 << 16,
        socket_high_water=8 << 20,
    )
    await start(build_app(config), config)
    stop = asyncio.Event()
    profile_to = os.environ.get("OCTOSYNC_BENCH_PROFILE")
    if profile_to:  # --profile: cProfile the serving process until the harness stops it
        import cProfile

        profiler = cProfile.Profile()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        profiler.enable()
        await stop.wait()
        profiler.disable()
        profiler.dump_stats(profile_to)
        return
    await stop.wait()


async def _open(http: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(url, max_msg_size=0)
    await ws.send_bytes(msgspec.msgpack.encode({"type": "DEVICE_HELLO"}))
    await ws.receive_bytes()  # DEVICE_ACK
    await ws.send_bytes(msgspec.msgpack.encode({"type": "SYNC_INIT", "mapName": MAP}))
    await ws.receive_bytes()  # SYNC_RESP_ROOT
    return ws


class Counting(asyncio.Protocol):
    """Counts SERVER_EVENT / SERVER_BATCH_EVENT events from raw socket bytes."""

    def __init__(self) -> None:
        self.events = 0
        self.tail = b""

    def data_received(self, data: bytes) -> None:
        buf = self.tail + data
        end = 0
        for m in _EVENTS.finditer(buf):
            end = m.end()
            if m.group(1) is not None:
                self.events += int.from_bytes(m.group(1), "big")
            elif m.group(2) is not None:
                self.events += m.group(2)[0] - 0x90
            else:
                self.events += 1
        self.tail = buf[max(end, len(buf) - 16) :]


async def _subscribers(port: int, n: int) -> None:
    """Subscriber process: open ``n`` connections, count events until stdin closes."""
    url = f"ws://127.0.0.1:{port}/topgun"
    counters: list[Counting] = []
    async with aiohttp.ClientSession() as http:
        socks = [await _open(http, url) for _ in range(n)]
        loop = asyncio.get_running_loop()
        for ws in socks:
            # hand each socket to a counting protocol: no per-frame Python after this point
            conn = ws._response.connection
            assert conn is not None
            assert conn.transport is not None
            counter = Counting()
            conn.transport.set_protocol(counter)
            counters.append(counter)
        print("ready", flush=True)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            print(sum(c.events for c in counters), flush=True)
            if line.strip() == b"stop":
                break


def _batch(node: str, seq: int, start: int, size: int, level: str, clock: list[int]) -> bytes:
    millis = time.time_ns() // 1_000_000
    if millis > clock[0]:
        clock[0], clock[1] = millis, 0
    ops = []
    for i in range(size):
        clock[1] += 1
        ops.append(
            {
                "mapName": MAP,
                "key": f"k{(start + i) % KEYS}",
                "id": str(seq * size + i + 1),
                "opType": "PUT",
                "record": {
                    "value": {"v": seq * size + i},
                    "timestamp": {"millis": clock[0], "counter": clock[1], "nodeId": node},
                },
            }
        )
    return msgspec.msgpack.encode(
        {"type": "OP_BATCH", "payload": {"ops": ops, "writeConcern": level}}
    )


async def _writer(
    ws: aiohttp.ClientWebSocketResponse,
    node: str,
    level: str,
    seconds: float,
    batch: int,
    window: int,
    latencies: list[float],
) -> int:
    """Send batches for ``seconds`` with at most ``window`` in flight; returns ops acked."""
    sent: dict[str, float] = {}
    clock = [0, 0]
    acked = 0
    seq = 0
    deadline = time.monotonic() + seconds
    decode = msgspec.msgpack.Decoder().decode
    while True:
        while len(sent) < window and time.monotonic() < deadline:
            seq += 1
            last = str(seq * batch)
            await ws.send_bytes(_batch(node, seq - 1, seq * batch, batch, level, clock))
            sent[last] = time.monotonic()
        if not sent:
            return acked
        data = await asyncio.wait_for(ws.receive_bytes(), 30)
        if b"OP_ACK" not in data[:16]:
            continue  # the other writers' events (a writer has its map open): not decoded
        msg = decode(data)
        if msg.get("type") != "OP_ACK":
            continue
        at = sent.pop(msg["payload"]["lastId"], None)
        if at is not None:
            latencies.append(time.monotonic() - at)
            acked += batch


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _core_in_process(ops: int, batch: int, subscribers: int) -> float:
    """The face's rules without sockets: ``TopGunCore.handle`` on the same decoded frames
    (validation, journal records, the merge, events encoded once for the subscribers)."""
    from octosync.crdt.sync_messages import SyncInit
    from octosync.server.auth import ANONYMOUS_DEV
    from octosync.topgun import TopGunCore
    from octosync.wire import topgun as tg

    core = TopGunCore(lambda: time.time_ns() // 1_000_000, persistent=True)
    for conn in range(subscribers + 1):
        core.connect(conn, ANONYMOUS_DEV)
        if conn:
            core.handle(conn, SyncInit(MAP, 0))
    clock = [0, 0]
    frames = [_batch("w", seq, seq * batch, batch, "APPLIED", clock) for seq in range(ops // batch)]
    flush = getattr(core, "flush", None)  # a baseline tree may fan out inside handle
    t0 = time.perf_counter()
    for frame in frames:
        core.handle(0, tg.decode(frame))
        if flush is not None:
            flush()  # the server flushes once per loop turn: here once per frame, the worst
    return len(frames) * batch / (time.perf_counter() - t0)


def _ceiling(ops: int, batch: int) -> float:
    """The same LWW ops folded in-process by ``crdt.MapStore``: ops/s."""
    from octosync.crdt import MapStore, OpKind, OpRecord, Timestamp

    value = msgspec.msgpack.encode({"v": 1})
    records = [
        OpRecord(
            MAP,
            f"k{i % KEYS}",
            OpKind.PUT,
            value,
            Timestamp(1_000 + i // batch, i, "w"),
            "w",
            str(i),
        )
        for i in range(ops)
    ]
    store = MapStore()
    t0 = time.perf_counter()
    store.apply_all(records)
    store.merkle(MAP).root()
    return ops / (time.perf_counter() - t0)


Result = tuple[str, int, float, list[float], int, float]
"""(write concern, ops acked, seconds, ack latencies, events delivered, server CPU seconds)."""


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux ``/proc``): on a shared machine the
    server's CPU per op is steadier than its wall-clock rate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _env(src: str | None) -> dict[str, str]:
    """The environment of a server process importing octosync from ``src`` (None: this one)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def _core_rate(src: str | None, ops: int, batch: int, subscribers: int, runs: int = 3) -> float:
    """``_core_in_process`` in a child importing octosync from ``src``: the best of ``runs``
    (on a shared machine the fastest run is the one least disturbed by others)."""
    rates = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, str(HERE), "_core", str(ops), str(batch), str(subscribers)],
            env=_env(src),
            capture_output=True,
            check=True,
        )
        rates.append(float(out.stdout))
    return max(rates)


async def _measure(args: argparse.Namespace, src: str | None) -> list[Result]:
    """One full run (server, subscribers, writers at each level) against the server code in
    ``src`` (None: the tree this script is imported from)."""
    port = _free_port()
    data = tempfile.mkdtemp(prefix="octosync-topgun-bench-")
    command = [sys.executable, str(HERE), "_server", str(port), data]
    server = subprocess.Popen(command, env=_env(src))
    subs: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        subs = subprocess.Popen(
            [sys.executable, str(HERE), "_subs", str(port), str(args.subscribers)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert subs.stdout is not None
        assert subs.stdin is not None
        assert subs.stdout.readline().strip() == b"ready"

        def events_so_far(stop: bool = False) -> int:
            assert subs is not None
            assert subs.stdin is not None
            assert subs.stdout is not None
            subs.stdin.write(b"stop\n" if stop else b"count\n")
            subs.stdin.flush()
            return int(subs.stdout.readline())

        url = f"ws://127.0.0.1:{port}/topgun"
        results: list[Result] = []
        async with aiohttp.ClientSession() as http:
            writers = [await _open(http, url) for _ in range(args.writers)]
            for level in ("APPLIED", "PERSISTED"):
                latencies: list[float] = []
                before = events_so_far()
                cpu0 = _cpu_seconds(server.pid)
                t0 = time.monotonic()
                counts = await asyncio.gather(
                    *(
                        _writer(
                            ws, f"w{i}", level, args.seconds, args.batch, args.window, latencies
                        )
                        for i, ws in enumerate(writers)
                    )
                )
                elapsed = time.monotonic() - t0
                await asyncio.sleep(0.5)  # let the last events arrive
                events = events_so_far() - before
                cpu = _cpu_seconds(server.pid) - cpu0
                results.append((level, sum(counts), elapsed, latencies, events, cpu))
            for ws in writers:
                await ws.close()
        events_so_far(stop=True)
        return results
    finally:
        for proc in (subs, server):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)


def _report(name: str, results: list[Result], ceiling: float, core: float, subs: int) -> None:
    print(f" {name}:")
    for level, ops, elapsed, lat, events, cpu in results:
        rate = ops / elapsed
        print(
            f"  {level:9s} {rate:10,.0f} ops/s acked   ack p50 {_pct(lat, 0.5) * 1e3:6.1f} ms"
            f"  p99 {_pct(lat, 0.99) * 1e3:6.1f} ms   events delivered "
            f"{events / elapsed:12,.0f}/s   ({rate / ceiling:.1%} of the ceiling)   "
            f"server CPU {cpu / max(ops, 1) * 1e6:5.1f} us/op ({ops / max(cpu, 1e-9):,.0f} ops "
            "per CPU second)"
        )
    print(
        f"  core      {core:10,.0f} ops/s  (TopGunCore.handle in-process on the same "
        f"frames, {subs} subscribers, no sockets)"
    )


async def _main(args: argparse.Namespace) -> None:
    runs: list[tuple[str, str | None, list[Result], float]] = []
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline_src:
        trees.insert(0, (f"baseline {args.baseline_src}", args.baseline_src))
    for name, src in trees:
        results = await _measure(args, src)
        total = max(sum(r[1] for r in results), 10_000)
        core = _core_rate(src, total, args.batch, args.subscribers)
        runs.append((name, src, results, core))
    total = max(sum(r[1] for _, _, res, _ in runs for r in res), 10_000)
    ceiling = _ceiling(total, args.batch)
    print(
        f"topgun face: {args.writers} writers x batches of {args.batch} LWW ops over "
        f"{KEYS} keys, window {args.window}; {args.subscribers} subscribers; "
        f"{args.seconds:g} s per level; journal durability full"
    )
    for name, _, results, core in runs:
        _report(name, results, ceiling, core, args.subscribers)
    print(f"  ceiling   {ceiling:10,.0f} ops/s  (the same ops folded in-process by crdt.MapStore)")
    if len(runs) == 2:
        (_, _, before, core_before), (_, _, after, core_after) = runs
        for (level, ops0, t0, _, _, c0), (_, ops1, t1, _, _, c1) in zip(before, after, strict=True):
            print(
                f"  {level:9s} this tree / baseline: {(ops1 / t1) / (ops0 / t0):.2f}x ops/s, "
                f"{(ops1 / c1) / (ops0 / c0):.2f}x ops per server CPU second"
            )
        print(f"  core      this tree / baseline: {core_after / core_before:.2f}x")
    print("  published TopGun figure: 483,000 ops/s fire-and-forget, in-process, M1 Max")
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_server":
        asyncio.run(_serve(int(sys.argv[2]), sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_subs":
        asyncio.run(_subscribers(int(sys.argv[2]), int(sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_core":
        print(_core_in_process(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="4 writers, 20 subscribers, 2 s")
    parser.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="also run the server from this source tree first (e.g. a main checkout's src) "
        "and print this tree's figures against it",
    )
    args = parser.parse_args()
    if args.quick:
        args.writers, args.subscribers, args.seconds = 4, 20, 2.0
    asyncio.run(_main(args))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
