"""Multi-writer benchmark: many writers editing one shared document, many subscribers reading it.

The server runs in its own process with its journal on (an op is fanned out and acknowledged
only after its group commit). Writers (in this process) are plane members that each keep up to
``--window`` frames in flight, one small op per frame, alternating an LWW register (``wI``,
its value the send time) and their own PN-counter entry (``clicks``); subscribers are plane
members in separate processes that scan each chunk they read for ops. Reported:

- op deliveries/s: ops received by subscribers during the measured window (every accepted op
  changes the document, so each reaches every subscriber), counted as ``bench/fanout.py``
  counts deltas;
- p99 from a write to the *last* subscriber: every writer's register ops carry their send time
  (CLOCK_MONOTONIC, shared by the machine's processes); per op, the slowest subscriber's
  latency, then the 99th percentile over those ops (the Node subscribers of the same-run
  comparison below sample writer 0's ops only);
- the CPU seconds the server, the subscriber processes and the writers used while writing,
  and the server's CPU per frame it wrote (what a busy machine's scheduling does not inflate).

With ``--peer hocuspocus`` the same writes go, in the same run, through a Hocuspocus server
(npm ``@hocuspocus/server`` with ``yjs``, installed in a cache folder on first use) as ``Y.Map``
sets to the same number of subscribers, and the ratio is printed. Usage::

    python bench/crdt_plane.py                 # 50 writers, 1,000 subscribers, 10 s
    python bench/crdt_plane.py --quick         # 10 writers, 100 subscribers, 3 s (< 1 min)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from _harness import NODE_CACHE, cpu_seconds, free_port, node_folder

HERE = Path(__file__).resolve()
FEATURE = "distributed_crdt"
STREAM = "bench-doc"


def node_of(name: str) -> int:
    h = 0xCBF29CE484222325
    for byte in name.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFF_FFFF_FFFF_FFFF
    return h & 0xFFFF_FFFF_FFFF


def handshake(peer: int) -> str:
    return json.dumps(
        {
            "protocol_id": "lazily-ipc",
            "protocol_major_version": 1,
            "codec": "json",
            "max_frame_size": 1 << 20,
            "fragmentation_supported": False,
            "ordered_reliable": True,
            "peer_id": peer,
            "session_id": STREAM,
            "features": [FEATURE],
        }
    )


# --- the server ---------------------------------------------------------------------------------


async def _serve(port: int, data: str, durability: str) -> None:
    from octosync.server.app import ServerConfig, build_app
    from octosync.server.run import start

    config = ServerConfig(
        port=port,
        insecure_dev=True,
        data_dir=Path(data),
        journal=True,
        journal_durability="normal" if durability == "normal" else "full",
        max_connections_per_address=1 << 16,
    )
    await start(build_app(config), config)
    print("ready", flush=True)
    await asyncio.Event().wait()


# --- subscribers (each process holds many connections) ------------------------------------------

_LATENCY = re.compile(rb'"state":"([A-Za-z0-9+/]+=*)","key":"w\d+/lww"')
"""Every writer's register op carries its send time: about 125 samples a second at the paced
rate (writer 0's alone gave 25 in a 10 s run, so the p99 was the worst of 25)."""
_OP = b'"slot_id"'


UPGRADE = (
    b"GET /lazily HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


def ws_text(data: bytes) -> bytes:
    """A masked (zero key) WebSocket text frame, as a client sends."""
    n = len(data)
    header = bytes((0x81, 0x80 | n)) if n < 126 else bytes((0x81, 0xFE)) + struct.pack(">H", n)
    return header + b"\0\0\0\0" + data


class Subscriber:
    """A minimal WebSocket member that counts ops by scanning raw chunks (C-speed ``count`` and
    one regex): the harness must not be the bottleneck. A count split across two chunks is
    caught by keeping the unmatched tail."""

    __slots__ = ("buf", "sock")

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(UPGRADE + ws_text(handshake(random.randrange(1, 2**53)).encode()))
        self.buf = b""

    def joined(self, data: bytes) -> bool:
        """Reading the handshake reply and the document: True once the document came."""
        self.buf += data
        if b"crdt_sync" not in self.buf:
            return False
        self.buf = b""
        return True

    def scan(self, data: bytes, now: float, shared: dict[str, Any]) -> None:
        buf = self.buf + data
        cut = buf.rfind(b"}]}")
        if cut < 0:
            self.buf = buf
            return
        head, self.buf = buf[: cut + 3], buf[cut + 3 :]
        shared["ops"] += head.count(_OP)
        worst = shared["worst"]
        for m in _LATENCY.finditer(head):
            sent = float(binascii.a2b_base64(m.group(1)))
            if now - sent > worst.get(sent, -1.0):  # per op, this process's slowest member
                worst[sent] = now - sent


def _subscribe(port: int, n: int, start: float, seconds: float, out: str) -> None:
    """``n`` members read by one ``epoll`` loop, no asyncio: a chunk costs a ``recv`` and a
    scan, so four such processes do not take the CPU from the server they measure. Arrivals
    are stamped when ``epoll`` returns them (each chunk was there by then)."""
    shared: dict[str, Any] = {"ops": 0, "worst": {}}
    ep = select.epoll()
    members: dict[int, Subscriber] = {}
    for _ in range(n):
        sub = Subscriber(port)
        sub.sock.setblocking(False)
        members[sub.sock.fileno()] = sub
        ep.register(sub.sock.fileno(), select.EPOLLIN)
    waiting = set(members)
    while waiting:
        for fd, _ in ep.poll(30.0):
            if members[fd].joined(members[fd].sock.recv(1 << 16)):
                waiting.discard(fd)
    print("ready", flush=True)
    end = start + seconds
    while (now := time.monotonic()) < end:
        events = ep.poll(max(0.0, min(end - now, 0.1)))
        now = time.monotonic()
        for fd, _ in events:
            data = members[fd].sock.recv(1 << 16)
            if not data:
                ep.unregister(fd)
            elif start <= now < end:
                members[fd].scan(data, now, shared)
    latencies = list(shared["worst"].items())
    Path(out).write_text(json.dumps({"ops": shared["ops"], "latencies": latencies}))


# --- writers (this process) ---------------------------------------------------------------------


async def _writers(
    port: int, writers: int, window: int, start: float, seconds: float, rate: float | None
) -> tuple[int, int]:
    """Ops acknowledged during the window, and the clicks written in all (every one acked)."""
    acked = 0
    clicks = 0
    deadline = start + seconds
    async with aiohttp.ClientSession() as http:

        async def writer(i: int) -> None:
            nonlocal acked, clicks
            peer = 1_000_000 + i
            ws = await http.ws_connect(f"ws://127.0.0.1:{port}/lazily", max_msg_size=0)
            await ws.send_str(handshake(peer))
            await ws.receive()  # reply
            await ws.receive()  # the document
            in_flight = asyncio.Semaphore(window)
            logical = tally = 0

            async def read() -> None:
                nonlocal acked
                mine = f'"peer":{peer}}}'
                async for msg in ws:
                    if '"error"' in msg.data[:20]:
                        raise SystemExit(f"writer {i}: {msg.data}")
                    own = msg.data.count(mine)  # its acks (the rest is others' ops)
                    if time.monotonic() <= deadline:
                        acked += own
                    for _ in range(own):
                        in_flight.release()

            reader = asyncio.get_running_loop().create_task(read())
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            gap = None if rate is None else writers / rate
            due = start + random.random() * (gap or 0)
            while time.monotonic() < deadline:
                if gap is not None:  # paced: the offered load, not how fast acks come back
                    due += gap
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                await in_flight.acquire()
                now = time.monotonic()
                logical += 1
                wall = time.time_ns() // 1_000_000
                stamp = {"wall_time": wall, "logical": logical, "peer": peer}
                if logical % 2:
                    state, key, node = repr(now).encode(), f"w{i}/lww", node_of(f"w{i}")
                else:
                    tally += 1
                    state, key, node = b"[%d,0]" % tally, f"clicks/pn/{peer}", node_of("clicks")
                op = {
                    "slot_id": node,
                    "stamp": stamp,
                    "state": base64.b64encode(state).decode(),
                    "key": key,
                }
                await ws.send_str(json.dumps({"type": "crdt_sync", "ops": [op]}))
            for _ in range(window):  # every op acknowledged before it leaves
                await in_flight.acquire()
            clicks += tally
            await ws.close()
            reader.cancel()

        await asyncio.gather(*(writer(i) for i in range(writers)))
    return acked, clicks


async def _count_clicks(port: int) -> int:
    """A late member's view of the counter: the sum of every writer's entry."""
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{port}/lazily", max_msg_size=0)
        await ws.send_str(handshake(7))
        await ws.receive()
        doc = json.loads((await ws.receive()).data)
        await ws.close()
    total = 0
    for op in doc.get("ops", []):
        if op.get("key", "").startswith("clicks/pn/"):
            p, n = json.loads(base64.b64decode(op["state"]))
            total += p - n
    return total


# --- the run -----------------------------------------------------------------------------------


def frames_out(port: int) -> float:
    """Frames the server wrote to sockets so far (its ``/metrics``)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("octosync_frames_out_total "):
                return float(line.split()[1])
    raise SystemExit("the server's /metrics has no octosync_frames_out_total")


def sampled(latencies: list[tuple[float, float]]) -> int:
    return len({sent for sent, _ in latencies})


def p99_to_last(latencies: list[tuple[float, float]], q: float = 0.99) -> float | None:
    """The ``q`` quantile over ops of each op's slowest subscriber."""
    worst: dict[float, float] = {}
    for sent, latency in latencies:
        worst[sent] = max(worst.get(sent, 0.0), latency)
    values = sorted(worst.values())
    return None if not values else values[min(len(values) - 1, int(q * len(values)))]


def run_octosync(args: argparse.Namespace, js_subscribers: bool = False) -> dict[str, Any]:
    """``js_subscribers``: the subscribers are octosync.js documents under Node (the
    harness Hocuspocus's subscribers run in), instead of raw byte scanners."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="crdt-bench-")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", str(port), data, args.durability],
        stdout=subprocess.PIPE,
        env=env,
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        start = time.monotonic() + 5.0 + args.subscribers / (100 if js_subscribers else 200)
        outs = []
        per = -(-args.subscribers // args.processes)
        for k in range(args.processes):
            n = min(per, args.subscribers - k * per)
            if n <= 0:
                break
            out = f"{data}/sub{k}.json"
            outs.append(out)
            argv = [str(port), str(n), repr(start), repr(args.seconds), out]
            if js_subscribers:
                module = (HERE.parents[1] / "clients" / "js" / "octosync.js").as_uri()
                command = ["node", "octosync_subscribers.mjs", module, *argv]
                procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, cwd=HOCUSPOCUS))
            else:
                command = [sys.executable, str(HERE), "--subscribe", *argv]
                procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, env=env))
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == b"ready"
        if time.monotonic() > start:
            raise SystemExit("subscribers took too long to join: raise the start delay")
        frames_before = frames_out(port)
        cpu_before = [cpu_seconds(p.pid) for p in (server, *procs)]
        writers_before = time.process_time()
        acked, clicks = asyncio.run(
            _writers(port, args.writers, args.window, start, args.seconds, args.rate)
        )
        writers_cpu = time.process_time() - writers_before
        cpu = [cpu_seconds(p.pid) - b for p, b in zip((server, *procs), cpu_before, strict=True)]
        frames = frames_out(port) - frames_before
        counted = asyncio.run(_count_clicks(port))
        for p in procs:
            p.wait(timeout=60)
        ops, latencies = 0, []
        for out in outs:
            got = json.loads(Path(out).read_text())
            ops += got["ops"]
            latencies += [tuple(x) for x in got["latencies"]]
    finally:
        for p in [*procs, server]:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {
        "system": "octosync" + (" (octosync.js subscribers)" if js_subscribers else ""),
        "ops_acked_per_s": acked / args.seconds,
        "deliveries_per_s": ops / args.seconds,
        "p99_ms": None if (p := p99_to_last(latencies)) is None else p * 1000,
        "clicks_lost": clicks - counted,
        "p50_ms": None if (m := p99_to_last(latencies, 0.5)) is None else m * 1000,
        "cpu_s": {"server": cpu[0], "subscribers": sum(cpu[1:]), "writers": writers_cpu},
        "server_us_per_frame": cpu[0] / frames * 1e6 if frames else None,
        "samples": sampled(latencies),
    }


# --- the same-run peer: Hocuspocus (Node) ------------------------------------------------------

HOCUSPOCUS = NODE_CACHE / "hocuspocus"
HP_PACKAGES = ("@hocuspocus/server@3", "@hocuspocus/provider@3", "yjs@13", "ws@8")

HP_SERVER = """
import { Server } from "@hocuspocus/server";
const server = new Server({ port: Number(process.argv[2]), address: "127.0.0.1", quiet: true });
await server.listen();
console.log("ready");
"""

HP_COMMON = """
import { HocuspocusProvider, HocuspocusProviderWebsocket } from "@hocuspocus/provider";
import WebSocket from "ws";
export const now = () => Number(process.hrtime.bigint()) / 1e9; // CLOCK_MONOTONIC, as Python's
export function open(port) {
  const websocketProvider = new HocuspocusProviderWebsocket({
    url: `ws://127.0.0.1:${port}`, WebSocketPolyfill: WebSocket,
  });
  const provider = new HocuspocusProvider({ websocketProvider, name: "bench-doc" });
  provider.attach(); // v3: a provider given its own websocket attaches when told
  return new Promise((resolve) => provider.on("synced", () => resolve(provider)));
}
export const sleepUntil = (t) => new Promise((r) => setTimeout(r, Math.max(0, (t - now()) * 1000)));
"""

HP_SUBSCRIBERS = """
import { writeFileSync } from "node:fs";
import { open, now, sleepUntil } from "./common.mjs";
const [port, n, start, seconds, out] = process.argv.slice(2);
let ops = 0, recording = false;
const latencies = [];
for (let i = 0; i < Number(n); i += 1) {
  const provider = await open(Number(port));
  const map = provider.document.getMap("m");
  map.observe((event) => {
    if (!recording) return;
    ops += event.keysChanged.size;
    if (event.keysChanged.has("w0")) {
      const sent = map.get("w0");
      latencies.push([sent, now() - sent]);
    }
  });
}
console.log("ready");
await sleepUntil(Number(start));
recording = true;
await sleepUntil(Number(start) + Number(seconds));
recording = false;
writeFileSync(out, JSON.stringify({ ops, latencies }));
process.exit(0);
"""

OCTO_JS_SUBSCRIBERS = """
import { writeFileSync } from "node:fs";
import WebSocket from "ws";
import { now, sleepUntil } from "./common.mjs";
const [module, port, n, start, seconds, out] = process.argv.slice(2);
const { connect } = await import(module);
let ops = 0, recording = false;
const latencies = [];
const client = connect(`ws://127.0.0.1:${port}`, { WebSocket });
const docs = [];
for (let i = 0; i < Number(n); i += 1) {
  const doc = client.openDocument("bench-doc");
  const received = doc.received.bind(doc);
  doc.received = (text) => {
    if (recording) ops += text.split('"slot_id"').length - 1;
    received(text);
  };
  doc.register("w0").on("change", (sent) => recording && latencies.push([sent, now() - sent]));
  docs.push(doc.synced());
}
await Promise.all(docs);
console.log("ready");
await sleepUntil(Number(start));
recording = true;
await sleepUntil(Number(start) + Number(seconds));
recording = false;
writeFileSync(out, JSON.stringify({ ops, latencies }));
process.exit(0);
"""

HP_WRITERS = """
import { open, now, sleepUntil } from "./common.mjs";
const [port, writers, window, start, seconds] = process.argv.slice(2).map(Number);
const deadline = start + seconds;
let acked = 0;
async function writer(i) {
  const provider = await open(port);
  const map = provider.document.getMap("m");
  let waiting = null;
  provider.on("unsyncedChanges", () => {
    if (waiting && provider.unsyncedChanges < window) { const w = waiting; waiting = null; w(); }
  });
  await sleepUntil(start);
  let k = 0;
  while (now() < deadline) {
    if (provider.unsyncedChanges >= window) await new Promise((r) => (waiting = r));
    k += 1;
    if (k % 2) map.set(`w${i}`, now()); else map.set(`c${i}`, k);
    if (now() <= deadline) acked += 1;
    if (k % 64 === 0) await new Promise((r) => setImmediate(r));
  }
}
await Promise.all(Array.from({ length: writers }, (_, i) => writer(i)));
console.log(JSON.stringify({ acked }));
process.exit(0);
"""


def hocuspocus_ready() -> Path:
    """The Hocuspocus harness in the cache folder (npm install on first use)."""
    files = {
        "server.mjs": HP_SERVER,
        "common.mjs": HP_COMMON,
        "subscribers.mjs": HP_SUBSCRIBERS,
        "writers.mjs": HP_WRITERS,
        "octosync_subscribers.mjs": OCTO_JS_SUBSCRIBERS,
    }
    return node_folder("hocuspocus", HP_PACKAGES, files)


def run_hocuspocus(args: argparse.Namespace) -> dict[str, Any]:
    root = hocuspocus_ready()
    port = free_port()
    data = tempfile.mkdtemp(prefix="hp-bench-")
    server = subprocess.Popen(["node", "server.mjs", str(port)], cwd=root, stdout=subprocess.PIPE)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        start = time.monotonic() + 3.0 + args.subscribers / 200
        outs = []
        per = -(-args.subscribers // args.processes)
        for k in range(args.processes):
            n = min(per, args.subscribers - k * per)
            if n <= 0:
                break
            out = f"{data}/sub{k}.json"
            outs.append(out)
            argv = [str(port), str(n), repr(start), repr(args.seconds), out]
            procs.append(
                subprocess.Popen(
                    ["node", "subscribers.mjs", *argv], cwd=root, stdout=subprocess.PIPE
                )
            )
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == b"ready"
        if time.monotonic() > start:
            raise SystemExit("Hocuspocus subscribers took too long to join: raise the start delay")
        argv = [str(port), str(args.writers), str(args.window), repr(start), repr(args.seconds)]
        writers = subprocess.run(
            ["node", "writers.mjs", *argv], cwd=root, capture_output=True, check=True
        )
        acked = json.loads(writers.stdout.decode().strip().splitlines()[-1])["acked"]
        for p in procs:
            p.wait(timeout=60)
        ops, latencies = 0, []
        for out in outs:
            got = json.loads(Path(out).read_text())
            ops += got["ops"]
            latencies += [tuple(x) for x in got["latencies"]]
    finally:
        for p in [*procs, server]:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {
        "system": "hocuspocus",
        "ops_acked_per_s": acked / args.seconds,
        "deliveries_per_s": ops / args.seconds,
        "p99_ms": None if (p := p99_to_last(latencies)) is None else p * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--window", type=int, default=4, help="frames in flight per writer")
    parser.add_argument(
        "--rate",
        type=float,
        help="ops/s offered by all writers together (default: as fast as acks)",
    )
    parser.add_argument("--processes", type=int, default=4, help="subscriber processes")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--peer", choices=("hocuspocus", "none"), default="none", help="same-run peer"
    )
    parser.add_argument(
        "--durability",
        choices=("full", "normal"),
        default="full",
        help="the journal's: full fsyncs every group commit (the default, as serve)",
    )
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--subscribe", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(int(args.serve[0]), args.serve[1], args.serve[2]))
        return
    if args.subscribe:
        port, n, start, seconds, out = args.subscribe
        _subscribe(int(port), int(n), float(start), float(seconds), out)
        return
    if args.quick:
        args.writers, args.subscribers, args.seconds, args.processes = 10, 100, 3.0, 2
    load = os.getloadavg()
    print(
        f"crdt plane: {args.writers} writers, {args.subscribers} subscribers, {args.seconds:g} s,"
        f" window {args.window}, rate {args.rate or 'unpaced'}, journal {args.durability};"
        f" load average before "
        f"{load[0]:.2f} on {os.cpu_count()} cores"
    )
    ours = run_octosync(args)
    p99 = "n/a" if ours["p99_ms"] is None else f"{ours['p99_ms']:.1f} ms"
    print(
        f"  octosync: {ours['deliveries_per_s']:,.0f} op deliveries/s, "
        f"{ours['ops_acked_per_s']:,.0f} ops acked/s, p99 write->last subscriber {p99} "
        f"(p50 {ours['p50_ms'] or 0:.1f} ms, over {ours['samples']} ops), "
        f"clicks lost {ours['clicks_lost']}; CPU seconds while writing: "
        + ", ".join(f"{k} {v:.2f}" for k, v in ours["cpu_s"].items())
        + f"; server CPU per frame written {ours['server_us_per_frame'] or 0:.1f} us"
    )
    if ours["clicks_lost"]:
        raise SystemExit("a late member's counter is not the sum of the acknowledged clicks")
    if args.peer == "hocuspocus":
        hocuspocus_ready()
        like = run_octosync(args, js_subscribers=True)
        p99 = "n/a" if like["p99_ms"] is None else f"{like['p99_ms']:.1f} ms"
        print(
            f"  octosync, subscribers as octosync.js documents under Node: "
            f"{like['deliveries_per_s']:,.0f} op deliveries/s, p99 write->last subscriber {p99},"
            f" clicks lost {like['clicks_lost']}"
        )
        peer = run_hocuspocus(args)
        p99 = "n/a" if peer["p99_ms"] is None else f"{peer['p99_ms']:.1f} ms"
        print(
            f"  hocuspocus (in memory, no persistence): {peer['deliveries_per_s']:,.0f} op "
            f"deliveries/s, {peer['ops_acked_per_s']:,.0f} ops sent/s, p99 write->last "
            f"subscriber {p99}"
        )
        if peer["deliveries_per_s"]:
            ratio = like["deliveries_per_s"] / peer["deliveries_per_s"]
            print(
                f"  ratio octosync / hocuspocus deliveries (both with their JS client under "
                f"Node as subscribers): {ratio:.2f}x"
            )


if __name__ == "__main__":
    main()
