"""Fan-out benchmark: one producer, many WebSocket subscribers on one stream.

Each system runs as its own server process; subscribers run in separate processes; the
producer (in this process) sends small deltas as fast as they are delivered, at most
``--window`` in flight as counted in the subscriber processes, for a bounded time. Every delta
carries its send time (CLOCK_MONOTONIC, shared by all processes on the
machine), so subscribers measure delivery latency. Systems, measured in the same run:

- ``octosync``: the hub's ``/lazily`` face (seed JSON deltas appended once to a shared log;
  each subscriber's backlog goes out in one socket write, the same bytes object for every
  caught-up subscriber; stalled subscribers are reset, never waited for);
- ``bare``: a bare aiohttp broadcast loop, one ``send_str`` per message per connection;
- ``socketio``: python-socketio (aiohttp mode) emitting each message to a room;
- ``node-socketio``: Socket.IO on Node (npm ``socket.io``), the producer's socket emitting
  each message to the room;
- ``node-ws``: a bare Node broadcast loop on npm ``ws``, one ``send`` per message per socket.

The Node peers are installed by npm into ``~/.cache/octosync/fanout-node`` on first use and
skipped, with one line, where node or npm is absent. Every system carries the same delta JSON
bytes, and the same subscriber processes (the raw client below) read all of them. Usage::

    python bench/fanout.py                 # 1,000 subscribers, 10 s per system
    python bench/fanout.py --quick         # 50 subscribers, 3 s per system
    python bench/fanout.py --subscribers 200 --seconds 5 --systems octosync,bare
    python bench/fanout.py --systems octosync,node-socketio,node-ws
    python bench/fanout.py --rounds 3      # each system 3 times, interleaved; median per column
    python bench/fanout.py --window 8      # less in flight: lower latency, lower throughput
    python bench/fanout.py --offered 100000,200000,300000   # also paced, at these rates

``--offered`` adds, for every system, runs at fixed offered rates beside saturation: the
producer paces deltas at ``rate / subscribers`` per second (an offered rate counts deliveries,
as the deltas/s column does), each stamped with the time it was due rather than the time it
left, so a producer held up behind a slow server does not hide the wait (no coordinated
omission). Nothing waits for subscribers: the latency is read at a load the system is asked
to carry, not at the queue the closed loop's window builds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import json
import mmap
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import aiohttp

from _harness import NodeUnavailable, node_folder

HERE = Path(__file__).resolve()
TICK = os.sysconf("SC_CLK_TCK")
_F64 = struct.Struct(">d")

# --- the message every system carries -------------------------------------------------------


def delta_bytes(epoch: int, now: float) -> bytes:
    """A seed-dialect delta whose one cell_set carries the send time as an f64."""
    payload = base64.b64encode(_F64.pack(now)).decode()
    return (
        b'{"type":"delta","base_epoch":%d,"epoch":%d,"ops":[{"op":"cell_set","slot_id":0,'
        b'"payload":"%s"}]}' % (epoch, epoch + 1, payload.encode())
    )


# --- servers (each in its own process) ------------------------------------------------------


async def _run_octosync(port: int) -> None:
    from octosync.server.app import ServerConfig, build_app
    from octosync.server.run import start

    # The real serving path (connection guard included), with room for every subscriber
    # coming from one loopback address.
    config = ServerConfig(port=port, insecure_dev=True, max_connections_per_address=1 << 16)
    await start(build_app(config), config)
    await asyncio.Event().wait()


async def _run_bare(port: int) -> None:
    from aiohttp import web

    subs: set[web.WebSocketResponse] = set()

    async def sub(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        subs.add(ws)
        try:
            async for _ in ws:
                pass
        finally:
            subs.discard(ws)
        return ws

    async def pub(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        async for msg in ws:
            data = msg.data
            for s in list(subs):
                with contextlib.suppress(ConnectionError):
                    await s.send_str(data)
        return ws

    app = web.Application()
    app.router.add_get("/sub", sub)
    app.router.add_get("/pub", pub)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def _run_socketio(port: int) -> None:
    import socketio
    from aiohttp import web

    sio = socketio.AsyncServer(async_mode="aiohttp", ping_timeout=60, ping_interval=25)
    app = web.Application()
    sio.attach(app)

    @sio.event  # type: ignore[untyped-decorator]
    async def connect(sid: str, environ: dict[str, Any]) -> None:
        await sio.enter_room(sid, "r")

    @sio.on("pub")  # type: ignore[untyped-decorator]
    async def on_pub(sid: str, data: Any) -> None:
        await sio.emit("d", data, room="r", skip_sid=sid)

    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


SERVERS = {"octosync": _run_octosync, "bare": _run_bare, "socketio": _run_socketio}

NODE_PACKAGES = ("socket.io@4.8.1", "ws@8.18.3")
NODE_SERVER = """
import http from "node:http";
import { Server } from "socket.io";
import { WebSocketServer } from "ws";
const [system, port] = process.argv.slice(2);
const server = http.createServer();
if (system === "node-ws") {
  // the Node twin of _run_bare: one send per message per subscriber, as text
  const wss = new WebSocketServer({ server, perMessageDeflate: false });
  const subs = new Set();
  wss.on("connection", (ws, request) => {
    if (request.url === "/sub") {
      subs.add(ws);
      ws.on("close", () => subs.delete(ws));
    } else {
      ws.on("message", (data) => { for (const s of subs) s.send(data, { binary: false }); });
    }
  });
} else {
  // the Node twin of _run_socketio: every socket in one room, the producer's emits relayed
  const io = new Server(server, {
    pingTimeout: 60000, pingInterval: 25000, perMessageDeflate: false,
  });
  io.on("connection", (socket) => {
    socket.join("r");
    socket.on("pub", (data) => socket.to("r").emit("d", data));
  });
}
server.listen(Number(port), "127.0.0.1");
"""
NODE_SYSTEMS = ("node-socketio", "node-ws")
PROTOCOL = {
    "octosync": "octosync",
    "bare": "bare",
    "socketio": "socketio",
    "node-socketio": "socketio",
    "node-ws": "bare",
}
"""What subscribers and the producer speak to each system: a Node peer speaks its Python twin's."""


def node_peers() -> Path:
    """The folder holding the Node servers (npm install on first use); ``NodeUnavailable``."""
    return node_folder("fanout-node", NODE_PACKAGES, {"server.mjs": NODE_SERVER})


def server_command(system: str, port: int) -> tuple[list[str], Path | None]:
    """The server process for ``system`` and its working folder."""
    if system in NODE_SYSTEMS:
        return ["node", "server.mjs", system, str(port)], node_peers()
    return [sys.executable, str(HERE), "_server", system, str(port)], None


# --- subscribers (each process holds many connections) -----------------------------------------

HANDSHAKE = json.dumps(
    {
        "protocol_id": "lazily-ipc",
        "protocol_major_version": 1,
        "codec": "json",
        "max_frame_size": 1 << 20,
        "fragmentation_supported": False,
        "ordered_reliable": True,
        "peer_id": 1,
        "session_id": "bench",
        "features": [],
    }
)


_ITEM = re.compile(rb'"(snapshot)"|"cell_set"[^}]*"payload": ?"([A-Za-z0-9+/]{11}=)"')
"""A snapshot, or a delta's timed cell_set: matched in the raw stream, whatever the framing."""
_SIO_PING = b"\x81\x012"
"""An engine.io ping ("2") in a one-byte unmasked text frame; 0x81 never occurs in JSON text."""


class Tally:
    def __init__(self) -> None:
        self.deltas = 0
        self.frames = 0
        self.snapshots = 0
        self.latencies = array("d")
        self.recording = False


class RawWsClient(asyncio.Protocol):
    """A minimal WebSocket client that times deltas: the harness must not be the bottleneck.

    After the upgrade it does not walk WebSocket frames in Python at all: each chunk read from
    the socket is scanned with one regex (C speed) for delta send times and snapshots, and the
    unmatched tail is kept for the next chunk. Every delta is still timed individually, and the
    cost per delta is the same for every system (they all carry the same delta JSON). Sends
    (rare) text frames with a zero mask; Socket.IO pings are answered.
    """

    def __init__(self, system: str, path: str, tally: Tally) -> None:
        self.system = system
        self.protocol = PROTOCOL[system]
        self.path = path
        self.tally = tally
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handshaking = True
        self.early: asyncio.Queue[bytes] = asyncio.Queue()
        self.on_delta: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(
            (
                f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )

    def send_text(self, data: bytes) -> None:
        n = len(data)
        if n < 126:
            header = bytes((0x81, 0x80 | n))
        elif n < 65536:
            header = bytes((0x81, 0x80 | 126)) + struct.pack(">H", n)
        else:
            header = bytes((0x81, 0x80 | 127)) + struct.pack(">Q", n)
        assert self.transport is not None
        self.transport.write(header + b"\0\0\0\0" + data)  # zero mask: payload as is

    async def next_frame(self) -> bytes:
        """The next frame while handshaking (frames may arrive with the 101 response)."""
        return await self.early.get()

    def data_received(self, data: bytes) -> None:
        if self.handshaking:
            self._handshake_data(data)
            return
        buf = self.buf + data if self.buf else data
        if self.protocol == "socketio" and _SIO_PING in buf:
            self.send_text(b"3")
        now = time.monotonic()
        end = 0
        deltas = 0
        snapshots = 0
        times: list[float] = []
        unpack, decode = _F64.unpack, binascii.a2b_base64
        for m in _ITEM.finditer(buf):
            end = m.end()
            payload = m.group(2)
            if payload is None:
                snapshots += 1
            else:
                deltas += 1
                times.append(now - unpack(decode(payload))[0])
        tail = buf[end:]
        self.buf = tail[-512:] if len(tail) > 512 else tail
        if deltas and self.on_delta is not None:
            self.on_delta(deltas)
        tally = self.tally
        if tally.recording:
            tally.frames += deltas + snapshots
            tally.deltas += deltas
            tally.snapshots += snapshots
            tally.latencies.extend(times)

    def _handshake_data(self, data: bytes) -> None:
        """Until the session is set up: parse the upgrade response and frames one by one."""
        buf = self.buf + data
        pos = 0
        if not self.upgraded.done():
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            if b" 101 " not in buf[: buf.find(b"\r\n")]:
                self.upgraded.set_exception(ConnectionError(buf[:end].decode()))
                return
            self.upgraded.set_result(None)
            pos = end + 4
        size = len(buf)
        while size - pos >= 2:
            n = buf[pos + 1] & 0x7F
            off = 2
            if n == 126:
                if size - pos < 4:
                    break
                n = (buf[pos + 2] << 8) | buf[pos + 3]
                off = 4
            elif n == 127:
                if size - pos < 10:
                    break
                n = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                off = 10
            if size - pos < off + n:
                break
            self.early.put_nowait(buf[pos + off : pos + off + n])
            pos += off + n
        self.buf = buf[pos:]


async def open_subscriber(system: str, port: int, tally: Tally) -> RawWsClient:
    path = {
        "octosync": "/lazily",
        "bare": "/sub",
        "socketio": "/socket.io/?EIO=4&transport=websocket",
    }[PROTOCOL[system]]
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(
        lambda: RawWsClient(system, path, tally), "127.0.0.1", port
    )
    await client.upgraded
    if system == "octosync":
        client.send_text(HANDSHAKE.encode())
        await client.next_frame()  # the server's handshake
    elif client.protocol == "socketio":
        await client.next_frame()  # engine.io open
        client.send_text(b"40")
        await client.next_frame()  # socket.io connect ack
    client.handshaking = False
    return client


class Progress:
    """Deltas seen by each subscriber process's last connection, in a shared file mapping.

    The producer reads the minimum over processes: a delta counts as delivered only once the
    slowest subscriber process has it, so the flow control sees the queues that latency sees.
    """

    def __init__(self, path: str, slots: int, create: bool = False) -> None:
        if create:
            Path(path).write_bytes(bytes(8 * slots))
        self._file = open(path, "r+b")  # noqa: SIM115 - kept open with the mapping
        self._map = mmap.mmap(self._file.fileno(), 8 * slots)
        self.counts = memoryview(self._map).cast("q")

    def slowest(self) -> int:
        return min(self.counts)

    def close(self) -> None:
        self.counts.release()
        self._map.close()
        self._file.close()


async def _subscribers_main(
    system: str, port: int, n: int, seconds: float, progress_path: str, slot: int, slots: int
) -> None:
    tally = Tally()
    clients = [await open_subscriber(system, port, tally) for _ in range(n)]
    progress = Progress(progress_path, slots)
    counts = progress.counts

    def seen(k: int) -> None:
        counts[slot] += k

    clients[-1].on_delta = seen
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    line = await loop.run_in_executor(None, sys.stdin.readline)
    assert line.startswith("GO")
    tally.recording = True
    await asyncio.sleep(seconds + 1.0)  # the run, then a second for the tail to arrive
    tally.recording = False
    for c in clients:
        if c.transport is not None:
            c.transport.close()
    out = {
        "deltas": tally.deltas,
        "frames": tally.frames,
        "snapshots": tally.snapshots,
        "latencies": base64.b64encode(tally.latencies.tobytes()).decode(),
    }
    print("RESULT " + json.dumps(out), flush=True)


# --- producer (this process) ----------------------------------------------------------------


async def _produce(
    system: str,
    port: int,
    seconds: float,
    window: int,
    progress: Progress,
    interval: float | None = None,
) -> int:
    """Send deltas as fast as they are delivered: at most ``window`` in flight; or, given an
    ``interval``, one delta every ``interval`` seconds whatever was delivered (paced).

    "In flight" is measured in the subscriber processes themselves (``Progress``: the last
    connection of each, the slowest process counts), so the producer cannot run ahead of
    subscribers whose socket buffers are filling; this keeps queues (and latency) bounded.
    The window is the throughput/latency knob: by Little's law the standing delay is about
    ``window / deltas per second``.
    """
    base = f"ws://127.0.0.1:{port}"
    protocol = PROTOCOL[system]
    sent = 0
    skipped = 0
    async with aiohttp.ClientSession() as http:
        if system == "octosync":
            ws = await http.ws_connect(f"{base}/lazily")
            await ws.send_str(HANDSHAKE.replace('"features": []', '"features": ["publish"]'))
            await ws.receive()
            snap = {
                "type": "snapshot",
                "epoch": 0,
                "nodes": [
                    {
                        "slot_id": 0,
                        "type_tag": "f64",
                        "state": "resolved",
                        "payload": base64.b64encode(_F64.pack(0.0)).decode(),
                    }
                ],
                "roots": [0],
            }
            await ws.send_str(json.dumps(snap))
        elif protocol == "bare":
            ws = await http.ws_connect(f"{base}/pub")
        else:
            ws = await http.ws_connect(f"{base}/socket.io/?EIO=4&transport=websocket")
            await ws.receive()
            await ws.send_str("40")
            await ws.receive()
        start = time.monotonic()
        deadline = start + seconds
        stalled_since = None
        while (now := time.monotonic()) < deadline:
            if interval is not None:
                due = start + sent * interval
                if due > now:
                    await asyncio.sleep(due - now)
                    continue
                await _send_delta(ws, system, protocol, delta_bytes(sent, due))
                sent += 1
                continue
            if sent - progress.slowest() - skipped >= window:
                if stalled_since is None:
                    stalled_since = now
                elif now - stalled_since > 1.0:
                    skipped += 1  # a lost delta (reset) must not stall us
                await asyncio.sleep(0.0005)
                continue
            stalled_since = None
            await _send_delta(ws, system, protocol, delta_bytes(sent, time.monotonic()))
            sent += 1
        seen = progress.slowest()
        print(f"# {system}: the slowest subscriber process saw {seen} of {sent}", file=sys.stderr)
        await ws.close()
    return sent


async def _send_delta(
    ws: aiohttp.ClientWebSocketResponse, system: str, protocol: str, data: bytes
) -> None:
    """One delta, as ``system``'s producers send it."""
    if protocol == "socketio":
        await ws.send_str('42["pub",' + data.decode() + "]")
    elif system == "octosync":
        await ws.send_bytes(data)
    else:
        await ws.send_str(data.decode())


# --- orchestration --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise TimeoutError(f"server on port {port} did not start")


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _stalled_subscriber(port: int) -> socket.socket:
    """A subscriber that upgrades, handshakes, then never reads (a tiny receive buffer)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(
        b"GET /lazily HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    hs = HANDSHAKE.encode()
    s.sendall(bytes([0x81, 0x80 | 126]) + len(hs).to_bytes(2, "big") + b"\0\0\0\0" + hs)
    return s


async def run_system(
    system: str,
    subscribers: int,
    seconds: float,
    procs: int,
    window: int,
    stalled: int = 0,
    offered: float | None = None,
) -> dict[str, Any]:
    """One system, one run: saturation (closed loop, ``window``) or ``offered`` deltas/s."""
    interval = subscribers / offered if offered else None
    port = _free_port()
    py = sys.executable
    command, cwd = server_command(system, port)
    server = subprocess.Popen(command, cwd=cwd)
    subs: list[subprocess.Popen[str]] = []
    fd, progress_path = tempfile.mkstemp(prefix="octosync-fanout-")
    os.close(fd)
    progress = Progress(progress_path, procs, create=True)
    try:
        await _wait_port(port)
        share = [subscribers // procs + (1 if i < subscribers % procs else 0) for i in range(procs)]
        for slot, n in enumerate(share):
            subs.append(
                subprocess.Popen(
                    [
                        py,
                        str(HERE),
                        "_subs",
                        system,
                        str(port),
                        str(n),
                        str(seconds),
                        progress_path,
                        str(slot),
                        str(procs),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        loop = asyncio.get_running_loop()
        for p in subs:
            assert p.stdout is not None
            line = await asyncio.wait_for(loop.run_in_executor(None, p.stdout.readline), 300)
            if not line.startswith("READY"):
                raise RuntimeError(f"subscriber process failed to connect: {line!r}")
        stuck = [_stalled_subscriber(port) for _ in range(stalled)]
        rss0 = _rss_mib(server.pid)
        cpu0 = _cpu_ticks(server.pid)
        for p in subs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        t0 = time.monotonic()
        sent = await _produce(system, port, seconds, window, progress, interval)
        await asyncio.sleep(1.0)
        elapsed = time.monotonic() - t0
        cpu = (_cpu_ticks(server.pid) - cpu0) / TICK
        rss = _rss_mib(server.pid)
        for s in stuck:
            s.close()
        deltas = frames = snapshots = 0
        latencies: list[float] = []
        for p in subs:
            out, _ = await loop.run_in_executor(None, p.communicate)
            result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT"))[7:])
            deltas += result["deltas"]
            frames += result["frames"]
            snapshots += result["snapshots"]
            arr = array("d")
            arr.frombytes(base64.b64decode(result["latencies"]))
            latencies.extend(arr)
        latencies.sort()
        return {
            "system": system if not stalled else f"{system}+{stalled}stalled",
            "offered": offered or 0,
            "delivered_pct": 100 * deltas / (sent * subscribers) if sent else 0.0,
            "server_rss_start_mib": rss0,
            "subscribers": subscribers,
            "sent": sent,
            "deltas_per_s": deltas / seconds,
            "frames_per_s": frames / seconds,
            "resets": max(0, snapshots - subscribers),
            "p50_ms": _pct(latencies, 0.50) * 1000,
            "p99_ms": _pct(latencies, 0.99) * 1000,
            "max_ms": (latencies[-1] if latencies else float("nan")) * 1000,
            "server_cpu_pct": 100 * cpu / elapsed,
            "server_rss_mib": rss,
        }
    finally:
        progress.close()
        Path(progress_path).unlink(missing_ok=True)
        for p in subs:
            if p.poll() is None:
                p.kill()
                p.wait()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row whose every number is the median of that column over ``rows`` (one system)."""
    out = dict(rows[0])
    for key, value in out.items():
        if isinstance(value, int | float):
            out[key] = statistics.median(r[key] for r in rows)
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'system':<14}{'subs':>6}{'sent':>10}{'deltas/s':>12}{'frames/s':>12}{'resets':>8}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'cpu %':>7}{'rss MiB':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['system']:<14}{r['subscribers']:>6.0f}{r['sent']:>10.0f}{r['deltas_per_s']:>12,.0f}"
            f"{r['frames_per_s']:>12,.0f}{r['resets']:>8.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
            f"{r['max_ms']:>9.1f}{r['server_cpu_pct']:>7.0f}{r['server_rss_mib']:>9.1f}"
        )
    by = {r["system"]: r for r in rows}
    ours = by.get("octosync")
    if ours:
        for other in ("bare", "socketio", *NODE_SYSTEMS):
            if other in by and by[other]["deltas_per_s"] > 0:
                ratio = ours["deltas_per_s"] / by[other]["deltas_per_s"]
                p99 = ours["p99_ms"] / by[other]["p99_ms"]
                print(
                    f"octosync / {other}: {ratio:.2f}x deltas delivered per second; p99 "
                    f"{ours['p99_ms']:.1f} vs {by[other]['p99_ms']:.1f} ms ({p99:.2f}x)"
                )


def print_offered(rate: float, rows: list[dict[str, Any]]) -> None:
    """One offered rate: each system's latency at it, and octosync's p99 against each peer's."""
    head = (
        f"{'system':<14}{'offered/s':>11}{'deltas/s':>12}{'delivered':>11}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'cpu %':>7}"
    )
    print(f"# offered {rate:,.0f} deltas/s (paced; latency from when each delta was due)")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['system']:<14}{r['offered']:>11,.0f}{r['deltas_per_s']:>12,.0f}"
            f"{r['delivered_pct']:>10.1f}%{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
            f"{r['max_ms']:>9.1f}{r['server_cpu_pct']:>7.0f}"
        )
    by = {r["system"]: r for r in rows}
    ours = by.get("octosync")
    if ours:
        for other in ("bare", "socketio", *NODE_SYSTEMS):
            if other in by and by[other]["p99_ms"] > 0:
                print(
                    f"at {rate:,.0f}/s octosync / {other}: p99 {ours['p99_ms']:.1f} vs "
                    f"{by[other]['p99_ms']:.1f} ms ({ours['p99_ms'] / by[other]['p99_ms']:.2f}x); "
                    f"delivered {ours['delivered_pct']:.1f}% vs {by[other]['delivered_pct']:.1f}%"
                )


def parse_rates(text: str) -> list[float]:
    """``--offered``: comma-separated deltas/s, each above zero."""
    rates = [float(x) for x in text.split(",") if x.strip()]
    if any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"offered rates must be above zero: {text}")
    return rates


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_server":
        asyncio.run(SERVERS[argv[1]](int(argv[2])))
        return 0
    if argv and argv[0] == "_subs":
        a = argv[1:]
        asyncio.run(
            _subscribers_main(a[0], int(a[1]), int(a[2]), float(a[3]), a[4], int(a[5]), int(a[6]))
        )
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--procs", type=int, default=2, help="subscriber processes")
    parser.add_argument("--systems", default="octosync,bare,socketio,node-socketio,node-ws")
    parser.add_argument("--quick", action="store_true", help="50 subscribers, 3 s, 1 process")
    parser.add_argument("--window", type=int, default=16, help="deltas in flight")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run every system N times, interleaved; medians"
    )
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument(
        "--offered",
        type=parse_rates,
        default=[],
        help="also run every system paced at these deltas/s (comma-separated), same run",
    )
    parser.add_argument(
        "--stalled",
        type=int,
        default=0,
        help="also run octosync with this many subscribers that never read (same run)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.subscribers, args.seconds, args.procs = 50, 3.0, 1
    rows = []
    systems = args.systems.split(",")
    if any(s in NODE_SYSTEMS for s in systems):
        try:
            node_peers()
        except NodeUnavailable as exc:
            print(f"# Node peers skipped: {exc}", file=sys.stderr)
            systems = [s for s in systems if s not in NODE_SYSTEMS]
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    paced: dict[tuple[float, str], list[dict[str, Any]]] = {
        (rate, s): [] for rate in args.offered for s in systems
    }
    for n in range(args.rounds):  # interleaved: a load change on a shared machine hits every system
        for system in systems if n % 2 == 0 else systems[::-1]:
            rounds[system].append(
                asyncio.run(
                    run_system(system, args.subscribers, args.seconds, args.procs, args.window)
                )
            )
            for rate in args.offered:
                paced[rate, system].append(
                    asyncio.run(
                        run_system(
                            system,
                            args.subscribers,
                            args.seconds,
                            args.procs,
                            args.window,
                            offered=rate,
                        )
                    )
                )
    if args.rounds > 1:
        for n in range(args.rounds):
            print(f"# round {n + 1}")
            print_table([rounds[s][n] for s in systems])
        print(f"# median of {args.rounds} rounds, every column on its own")
    rows = [median_row(rounds[s]) for s in systems]
    if args.stalled:
        rows.append(
            asyncio.run(
                run_system(
                    "octosync",
                    args.subscribers,
                    args.seconds,
                    args.procs,
                    args.window,
                    stalled=args.stalled,
                )
            )
        )
    print_table(rows)
    offered_rows = []
    for rate in args.offered:
        at_rate = [median_row(paced[rate, s]) for s in systems]
        offered_rows.extend(at_rate)
        print_offered(rate, at_rate)
    if args.stalled:
        base, hit = rows[0], rows[-1]
        print(
            f"{args.stalled} stalled subscriber(s): p99 {base['p99_ms']:.1f} -> "
            f"{hit['p99_ms']:.1f} ms ({hit['p99_ms'] / base['p99_ms'] - 1:+.0%}), "
            f"server RSS {hit['server_rss_start_mib']:.0f} -> {hit['server_rss_mib']:.0f} MiB"
        )
    if args.json:
        print(json.dumps(rows + offered_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
