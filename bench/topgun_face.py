"""TopGun face benchmark: protocol clients writing LWW batches to ``/topgun``, subscribers
receiving the events, and the same ops folded in-process by ``crdt/`` (the ceiling).

The octosync server runs in its own process (the real serving path: ``build_app`` with the
journal on, ``--insecure-dev`` so clients send ``DEVICE_HELLO``). Subscribers (``--subscribers``,
default 100) run in a second process: each opens the map with ``SYNC_INIT`` and offers
permessage-deflate as TopGun's own client does (``--plain``: no offer); one of them decodes
every message in full and counts its events (the reference), the others read each WebSocket
frame's header and the message's first bytes (type and event count; a compressed message's
start is inflated) and skip the rest, and must count exactly what the reference counts. This
process runs the writers (``--writers``, default 10): each sends ``OP_BATCH`` frames of
``--batch`` (100) PUTs over its own tenth of 1,000 keys with fresh HLC timestamps (so every op
changes state, is journaled and fans out), at most ``--window`` batches in flight, for
``--seconds`` per write concern (``APPLIED``, then ``PERSISTED``), and times each batch's
``OP_ACK``. Writers encode their batches before each level's clock starts (``--prebuild``): a
load generator's encoding is not the server's work. The CPU each process spends is reported
per op acked: the three share this machine's cores, so what the clients cost is taken from the
server. Usage::

    python bench/topgun_face.py                  # 10 writers, 100 subscribers, 5 s per level
    python bench/topgun_face.py --quick          # 4 writers, 20 subscribers, 2 s per level
    python bench/topgun_face.py --compare-plain  # subscribers without deflate first, same run
    python bench/topgun_face.py --baseline-src ../main/src   # before / after, same run
    python bench/topgun_face.py --stages         # also the server's CPU per op by stage

``OCTOSYNC_BENCH_PROFILE=FILE`` writes a cProfile of the serving process to ``FILE``.

Published figure for comparison: TopGun reports 483,000 ops/s fire-and-forget in-process on
an M1 Max (not measured here).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

HERE = Path(__file__).resolve()
MAP = "bench"
KEYS = 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Stages:
    """CPU time of the serving process's main thread by stage (``time.thread_time`` around
    the methods each stage is; a stage's own time, without the stages it calls), plus the CPU
    of the whole process by thread. The serving process dumps it to ``FILE`` on ``SIGUSR1``
    (``OCTOSYNC_BENCH_STAGES=FILE``); what the main thread spent outside every stage is the
    event loop, aiohttp's frame reading and the session glue left unmeasured."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"cycle collector (gc)": 0.0}
        self._stack: list[float] = []
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        """Time in the cycle collector (main thread only), taken out of the stage it
        interrupted, like a stage of its own."""
        if threading.current_thread() is not threading.main_thread():
            return
        if phase == "start":
            self._gc_started = time.thread_time()
            return
        spent = time.thread_time() - self._gc_started
        self.seconds["cycle collector (gc)"] += spent
        if self._stack:
            self._stack[-1] += spent

    def wrap(self, owner: type, name: str, stage: str) -> None:
        inner = getattr(owner, name)
        seconds, stack, clock = self.seconds, self._stack, time.thread_time
        seconds.setdefault(stage, 0.0)

        calls = f"calls: {stage}"
        seconds.setdefault(calls, 0)

        def timed(*args: object, **kwargs: object) -> object:
            seconds[calls] += 1
            stack.append(0.0)
            t0 = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                spent = clock() - t0
                children = stack.pop()
                seconds[stage] += spent - children
                if stack:
                    stack[-1] += spent

        setattr(owner, name, timed)

    def snapshot(self) -> dict[str, float]:
        out = dict(self.seconds)
        tick = os.sysconf("SC_CLK_TCK")
        main = str(os.getpid())
        for task in Path("/proc/self/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            who = "main thread" if task.name == main else "other threads (journal writer)"
            for i, kind in ((11, "user"), (12, "system")):
                key = f"{who} {kind}"
                out[key] = out.get(key, 0.0) + int(fields[i]) / tick
        return out


def _instrument() -> _Stages:
    """Stage accounting in the serving process (the methods each stage runs)."""
    from octosync.server.commit import Committer
    from octosync.server.runtime import Runtime
    from octosync.server.topgun_session import TopGunSession
    from octosync.topgun.core import TopGunCore

    stages = _Stages()
    stages.wrap(TopGunSession, "decode", "decode OP_BATCH (msgspec)")
    stages.wrap(TopGunSession, "handle", "session glue")
    stages.wrap(TopGunCore, "handle", "core: validate, records, HLC, merge, events")
    stages.wrap(TopGunCore, "flush", "core: fan-out encode (flush)")
    try:  # the TopGun face's fan-out; a baseline tree (--baseline-src) may predate the face
        from octosync.server.topgun_face import TopGunFace

        stages.wrap(TopGunFace, "deliver_all", "write to connections")
    except ImportError:
        stages.wrap(Runtime, "deliver_all", "write to connections")
    stages.wrap(Runtime, "deliver", "write to connections")
    stages.wrap(Committer, "submit", "journal submit")  # the one commit path every face takes
    return stages


async def _serve(port: int, data: str) -> None:
    from octosync.server.app import ServerConfig, build_app
    from octosync.server.run import settle_heap, start

    stages_to = os.environ.get("OCTOSYNC_BENCH_STAGES")
    stages = _instrument() if stages_to else None
    config = ServerConfig(
        port=port,
        data_dir=Path(data),
        insecure_dev=True,
        journal=True,
        max_connections_per_address=1 << 16,
        socket_high_water=8 << 20,
    )
    await start(build_app(config), config)
    if not os.environ.get("OCTOSYNC_BENCH_DEFAULT_GC"):
        settle_heap()  # as ``octosync serve`` does
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if stages is not None and stages_to:
        import json

        def dump() -> None:
            tmp = stages_to + ".tmp"
            Path(tmp).write_text(json.dumps(stages.snapshot()))
            os.replace(tmp, stages_to)

        loop.add_signal_handler(signal.SIGUSR1, dump)
    profile_to = os.environ.get("OCTOSYNC_BENCH_PROFILE")
    if profile_to:  # --profile: cProfile the serving process until the harness stops it
        import cProfile

        profiler = cProfile.Profile()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        profiler.enable()
        await stop.wait()
        profiler.disable()
        profiler.dump_stats(profile_to)
        return
    await stop.wait()


async def _open(
    http: aiohttp.ClientSession, url: str, *, deflate: bool = False
) -> aiohttp.ClientWebSocketResponse:
    """A connection with the map open; ``deflate`` offers permessage-deflate (the server then
    compresses each large fan-out message once for every connection that took it)."""
    ws = await http.ws_connect(url, max_msg_size=0, compress=15 if deflate else 0)
    await ws.send_bytes(msgspec.msgpack.encode({"type": "DEVICE_HELLO"}))
    await ws.receive_bytes()  # DEVICE_ACK
    await ws.send_bytes(msgspec.msgpack.encode({"type": "SYNC_INIT", "mapName": MAP}))
    await ws.receive_bytes()  # SYNC_RESP_ROOT
    return ws


_BATCH_PREFIX = b"\x82\xa4type\xb2SERVER_BATCH_EVENT\xa7payload\x81\xa6events"
_ONE_PREFIX = b"\x82\xa4type\xacSERVER_EVENT\xa7payload"
_PEEK = 64
"""Bytes looked at per plain frame: the longest WebSocket header (10) plus the batch prefix
(41) and its array header (up to 5)."""
_PEEK_DEFLATED = 10 + 2048
"""Bytes looked at per compressed frame: enough deflate input (its Huffman tables first) to
inflate the same prefix."""
_TAIL = b"\x00\x00\xff\xff"
_SHARED = bytearray(1 << 20)
"""One receive buffer for every subscriber: each chunk is counted before the next read."""


def _event_count(payload: bytes) -> int | None:
    """Events in a server message from the start of its payload; None for other messages."""
    if payload.startswith(_BATCH_PREFIX):
        at = len(_BATCH_PREFIX)
        tag = payload[at]
        if 0x90 <= tag <= 0x9F:
            return tag - 0x90
        if tag == 0xDC:
            return int.from_bytes(payload[at + 1 : at + 3], "big")
        if tag == 0xDD:
            return int.from_bytes(payload[at + 1 : at + 5], "big")
        raise ValueError(f"SERVER_BATCH_EVENT without an events array: {payload[:48]!r}")
    if payload.startswith(_ONE_PREFIX):
        return 1
    return None


class Counting(asyncio.BufferedProtocol):
    """Counts SERVER_EVENT / SERVER_BATCH_EVENT events on one socket: it walks the WebSocket
    frames by their headers and reads each message's type and event count from its first
    bytes (a frame that is neither is counted in ``other``), skipping the rest unread. Reads
    land in one shared buffer, so a subscriber costs a header parse per message, not a pass
    over every byte."""

    def __init__(self) -> None:
        self.events = 0
        self.messages = 0
        self.other = 0
        self.lost = False
        self._skip = 0
        self._head = b""

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(_SHARED)

    def buffer_updated(self, nbytes: int) -> None:
        data = memoryview(_SHARED)[:nbytes]
        pos = 0
        while True:
            if self._skip:
                take = min(self._skip, nbytes - pos)
                self._skip -= take
                pos += take
                if self._skip:
                    return
            if pos >= nbytes:
                return
            head = self._head + bytes(data[pos : pos + _PEEK_DEFLATED])
            frame = _frame(head)
            if frame is None:  # the header or the prefix continues in the next read
                self._head = head
                return
            size, count = frame
            self._skip = size - len(self._head)
            self._head = b""
            self.messages += 1
            if count is None:
                self.other += 1
            else:
                self.events += count

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def _frame(head: bytes) -> tuple[int, int | None] | None:
    """(frame size, events in it) for the unmasked frame starting ``head``; None when ``head``
    is too short to say."""
    if len(head) < 2:
        return None
    code = head[1] & 0x7F
    if head[1] & 0x80:
        raise ValueError("a server frame is never masked")
    if code < 126:
        hl, size = 2, code
    elif code == 126:
        hl, size = 4, int.from_bytes(head[2:4], "big")
    else:
        hl, size = 10, int.from_bytes(head[2:10], "big")
    deflated = bool(head[0] & 0x40)  # RSV1: a permessage-deflate message
    need = min(size, (_PEEK_DEFLATED if deflated else _PEEK) - 10)
    if len(head) < hl + need:
        return None
    opcode = head[0] & 0x0F
    if opcode != 0x2:
        return hl + size, None
    prefix = head[hl : hl + need]
    if deflated:  # each message stands alone (server_no_context_takeover): inflate its start
        whole = need == size
        prefix = zlib.decompressobj(-15).decompress(prefix + (_TAIL if whole else b""), _PEEK)
    return hl + size, _event_count(prefix)


class _RefEvent(msgspec.Struct, rename="camel"):
    map_name: str


class _RefEvents(msgspec.Struct):
    events: list[_RefEvent]


class _RefMessage(msgspec.Struct):
    type: str
    payload: msgspec.Raw


class _Reference:
    """One subscriber that decodes every message in full (each byte parsed by MsgPack, the
    events into typed Structs; fields it does not count are parsed and skipped) and counts
    the events in it: the count every header-counting subscriber must match."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.events = 0
        self.ws = ws

    async def run(self) -> None:
        message = msgspec.msgpack.Decoder(_RefMessage).decode
        batch = msgspec.msgpack.Decoder(_RefEvents).decode
        one = msgspec.msgpack.Decoder(_RefEvent).decode
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            body = message(msg.data)
            if body.type == "SERVER_BATCH_EVENT":
                self.events += sum(e.map_name == MAP for e in batch(body.payload).events)
            elif body.type == "SERVER_EVENT":
                self.events += one(body.payload).map_name == MAP


async def _subscribers(port: int, n: int, deflate: bool) -> None:
    """Subscriber process: open ``n`` connections (one of them the fully decoding reference),
    count events until stdin says stop; each line in gets one line out: events counted by
    the header-counting subscribers, by the reference, other messages, connections lost."""
    url = f"ws://127.0.0.1:{port}/topgun"
    counters: list[Counting] = []
    async with aiohttp.ClientSession() as http:
        socks = [await _open(http, url, deflate=deflate) for _ in range(n)]
        took = sum(bool(ws.compress) for ws in socks)
        loop = asyncio.get_running_loop()
        reference = _Reference(socks[0])
        reading = loop.create_task(reference.run())
        for ws in socks[1:]:
            # hand each socket to a counting protocol: no per-frame Python after this point
            conn = ws._response.connection
            assert conn is not None
            assert conn.transport is not None
            counter = Counting()
            conn.transport.set_protocol(counter)
            counters.append(counter)
        print("ready", took, flush=True)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            events = sum(c.events for c in counters)
            other = sum(c.other for c in counters)
            lost = sum(c.lost for c in counters) + reading.done()
            print(events, reference.events, other, lost, flush=True)
            if line.strip() == b"stop":
                break
        reading.cancel()


class _Ts(msgspec.Struct, rename="camel"):
    millis: int
    counter: int
    node_id: str


class _Record(msgspec.Struct):
    value: msgspec.Raw
    timestamp: _Ts


class _Op(msgspec.Struct, rename="camel"):
    map_name: str
    key: str
    id: str
    op_type: str
    record: _Record


class _Payload(msgspec.Struct, rename="camel"):
    ops: list[_Op]
    write_concern: str


class _OpBatch(msgspec.Struct, tag_field="type", tag="OP_BATCH"):
    """The client's ``OP_BATCH`` as its own Structs (the bench is a separate client: it does
    not borrow the server's wire module), so building a batch costs no dicts."""

    payload: _Payload


_KEYS = [f"k{i}" for i in range(KEYS)]
_VALUE = msgspec.msgpack.Encoder().encode


def _batch(
    node: str,
    seq: int,
    start: int,
    size: int,
    level: str,
    clock: list[int],
    keys: list[str] = _KEYS,
) -> bytes:
    """One ``OP_BATCH`` over ``keys`` (cyclically from ``start``) with fresh HLC timestamps
    from ``clock`` (every op newer than the ones built before it with that clock)."""
    millis = time.time_ns() // 1_000_000
    if millis > clock[0]:
        clock[0], clock[1] = millis, 0
    first, counter = seq * size, clock[1]
    clock[1] += size
    ops = [
        _Op(
            MAP,
            keys[(start + i) % len(keys)],
            str(first + i + 1),
            "PUT",
            _Record(msgspec.Raw(_VALUE({"v": first + i})), _Ts(millis, counter + i + 1, node)),
        )
        for i in range(size)
    ]
    return _VALUE(_OpBatch(_Payload(ops, level)))


def _prebuild(
    writers: int, level: str, batch: int, ops: int
) -> tuple[list[list[bytes]], list[list[int]]]:
    """About ``ops`` ops as ``OP_BATCH`` frames per writer, built before the clock starts (a
    load generator's encoding is not the server's work), and each writer's clock after them."""
    clocks = [[0, 0] for _ in range(writers)]
    out: list[list[bytes]] = [[] for _ in range(writers)]
    for seq in range(ops // (batch * writers)):
        for i in range(writers):
            keys = _writer_keys(i, writers)
            out[i].append(_batch(f"w{i}", seq, seq * batch, batch, level, clocks[i], keys))
    return out, clocks


def _writer_keys(i: int, writers: int) -> list[str]:
    """Writer ``i``'s share of the keys: writers never write one key, so every op is newer
    than the one it overwrites and each one changes state, is journaled and fans out."""
    per = max(1, KEYS // writers)
    return _KEYS[i * per : (i + 1) * per] or _KEYS[-per:]


def _frame_for(
    seq: int,
    ready: list[bytes],
    node: str,
    batch: int,
    level: str,
    clock: list[int],
    keys: list[str],
) -> bytes:
    """Batch number ``seq`` (from 1): prebuilt when there is one, else built now."""
    if seq <= len(ready):
        return ready[seq - 1]
    return _batch(node, seq - 1, (seq - 1) * batch, batch, level, clock, keys)


def _take_ack(
    data: bytes,
    decode: Callable[[bytes], Any],
    sent: dict[str, float],
    latencies: list[float],
    batch: int,
) -> int:
    """Ops acked by ``data`` when it is the ``OP_ACK`` of a batch in ``sent`` (its latency
    from the time ``sent`` holds); 0 for anything else (the other writers' events: a writer
    has its map open; they are not decoded)."""
    if b"OP_ACK" not in data[:16]:
        return 0
    msg = decode(data)
    if msg.get("type") != "OP_ACK":
        return 0
    at = sent.pop(msg["payload"]["lastId"], None)
    if at is None:
        return 0
    latencies.append(time.monotonic() - at)
    return batch


async def _writer(
    ws: aiohttp.ClientWebSocketResponse,
    node: str,
    level: str,
    seconds: float,
    batch: int,
    window: int,
    latencies: list[float],
    keys: list[str],
    ready: list[bytes],
    clock: list[int],
) -> int:
    """Send batches for ``seconds`` with at most ``window`` in flight; returns ops acked.
    ``ready`` holds this writer's batches built beforehand (:func:`_prebuild`); past them it
    builds more as it goes, with the same ``clock`` and ``keys`` (its own share)."""
    sent: dict[str, float] = {}
    acked = 0
    seq = 0
    deadline = time.monotonic() + seconds
    decode = msgspec.msgpack.Decoder().decode
    while True:
        while len(sent) < window and time.monotonic() < deadline:
            seq += 1
            last = str(seq * batch)
            frame = _frame_for(seq, ready, node, batch, level, clock, keys)
            await ws.send_bytes(frame)
            sent[last] = time.monotonic()
        if not sent:
            return acked
        data = await asyncio.wait_for(ws.receive_bytes(), 30)
        acked += _take_ack(data, decode, sent, latencies, batch)


async def _paced_writer(
    ws: aiohttp.ClientWebSocketResponse,
    node: str,
    level: str,
    seconds: float,
    batch: int,
    interval: float,
    latencies: list[float],
    keys: list[str],
    ready: list[bytes],
    clock: list[int],
) -> int:
    """Send one batch every ``interval`` seconds for ``seconds`` (an open loop: the offered
    rate does not wait for acks) and time each ack from the batch's scheduled send time, so
    a stall delays the batches behind it in the figures too (no coordinated omission).
    Returns ops acked."""
    sent: dict[str, float] = {}
    decode = msgspec.msgpack.Decoder().decode
    acked = 0
    done = asyncio.Event()

    async def send() -> None:
        start = time.monotonic()
        for seq in range(1, int(seconds / interval) + 1):
            due = start + (seq - 1) * interval
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            frame = _frame_for(seq, ready, node, batch, level, clock, keys)
            sent[str(seq * batch)] = due
            await ws.send_bytes(frame)
        done.set()

    sender = asyncio.get_running_loop().create_task(send())
    try:
        while not (done.is_set() and not sent):
            data = await asyncio.wait_for(ws.receive_bytes(), 30)
            acked += _take_ack(data, decode, sent, latencies, batch)
    finally:
        sender.cancel()
    return acked


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _core_in_process(ops: int, batch: int, subscribers: int) -> float:
    """The face's rules without sockets: ``TopGunCore.handle`` on the same decoded frames
    (validation, journal records, the merge, events encoded once for the subscribers: by the
    server's encoder where the core hands out typed messages)."""
    from octosync.crdt.sync_messages import SyncInit
    from octosync.server.auth import ANONYMOUS_DEV
    from octosync.topgun import TopGunCore
    from octosync.wire import topgun as tg

    encoded: Callable[[list[Any]], list[bytes]] | None = None
    if importlib.util.find_spec("octosync.server.topgun_wire") is not None:
        encoded = importlib.import_module("octosync.server.topgun_wire").data  # else: a baseline

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
        fx = core.handle(0, tg.decode(frame))
        if encoded is not None:
            encoded(fx.out)
        if flush is not None:
            fx = flush()  # the server flushes once per loop turn: here once per frame, the worst
            if encoded is not None:
                encoded(fx.out)
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


@dataclass
class Result:
    """One write concern's run: what was acked, what reached the subscribers, and the CPU
    each process spent meanwhile (they share this machine's cores)."""

    level: str
    ops: int
    seconds: float
    """Writing time: from the first batch to the last ack."""
    drained: float
    """Until the subscribers had the last events (or stopped receiving any)."""
    latencies: list[float]
    events: int
    """Counted by the header-counting subscribers (all but the reference)."""
    reference_events: int
    """Counted by the reference subscriber, which decodes every message."""
    other_messages: int
    subscribers_lost: int
    server_user: float
    server_sys: float
    subscribers_cpu: float
    writers_cpu: float
    stages: dict[str, float]
    """Server CPU seconds by stage and thread (``--stages``)."""
    deflated: int
    """Subscribers whose connection negotiated permessage-deflate."""

    @property
    def server_cpu(self) -> float:
        return self.server_user + self.server_sys


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time a process has used (Linux ``/proc``): on a shared machine the
    CPU per op is steadier than the wall-clock rate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


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


async def _measure(args: argparse.Namespace, src: str | None, deflate: bool) -> list[Result]:
    """One full run (server, subscribers, writers at each level) against the server code in
    ``src`` (None: the tree this script is imported from); ``deflate``: the subscribers offer
    permessage-deflate."""
    port = _free_port()
    data = tempfile.mkdtemp(prefix="octosync-topgun-bench-")
    command = [sys.executable, str(HERE), "_server", str(port), data]
    env = _env(src)
    stages_file = Path(data) / "stages.json"
    if args.stages:
        env["OCTOSYNC_BENCH_STAGES"] = str(stages_file)
    server = subprocess.Popen(command, env=env)

    async def stages() -> dict[str, float]:
        """The serving process's stage accounting so far (``--stages``), else nothing."""
        if not args.stages:
            return {}
        stages_file.unlink(missing_ok=True)
        server.send_signal(signal.SIGUSR1)
        for _ in range(100):
            if stages_file.exists():
                return dict(json.loads(stages_file.read_text()))
            await asyncio.sleep(0.05)
        raise RuntimeError("the server wrote no stage accounting")

    subs: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        subs = subprocess.Popen(
            [
                sys.executable,
                str(HERE),
                "_subs",
                str(port),
                str(args.subscribers),
                str(int(deflate)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert subs.stdout is not None
        assert subs.stdin is not None
        ready, took = subs.stdout.readline().split()
        assert ready == b"ready"
        deflated = int(took)

        def delivered(stop: bool = False) -> tuple[int, int, int, int]:
            """What the subscribers counted so far: (events at the header-counting ones,
            events at the reference, other messages, connections lost)."""
            assert subs is not None
            assert subs.stdin is not None
            assert subs.stdout is not None
            subs.stdin.write(b"stop\n" if stop else b"count\n")
            subs.stdin.flush()
            events, reference, other, lost = map(int, subs.stdout.readline().split())
            return events, reference, other, lost

        url = f"ws://127.0.0.1:{port}/topgun"
        results: list[Result] = []
        async with aiohttp.ClientSession() as http:
            writers = [await _open(http, url, deflate=deflate) for _ in range(args.writers)]
            phases: list[tuple[str, float | None]] = [("APPLIED", None), ("PERSISTED", None)]
            phases += [(level, rate) for level, rate in args.paced]
            for level, rate in phases:
                latencies: list[float] = []
                prebuild = args.prebuild if rate is None else int(rate * args.seconds)
                ready, clocks = _prebuild(args.writers, level, args.batch, prebuild)
                events0, reference0, other0, _ = delivered()
                user0, sys0 = _cpu_seconds(server.pid)
                stages0 = await stages()
                subs0, own0 = sum(_cpu_seconds(subs.pid)), _own_cpu()
                t0 = time.monotonic()
                if rate is None:
                    runs = [
                        _writer(
                            ws,
                            f"w{i}",
                            level,
                            args.seconds,
                            args.batch,
                            args.window,
                            latencies,
                            _writer_keys(i, args.writers),
                            ready[i],
                            clocks[i],
                        )
                        for i, ws in enumerate(writers)
                    ]
                else:
                    interval = args.writers * args.batch / rate
                    runs = [
                        _paced_writer(
                            ws,
                            f"w{i}",
                            level,
                            args.seconds,
                            args.batch,
                            interval,
                            latencies,
                            _writer_keys(i, args.writers),
                            ready[i],
                            clocks[i],
                        )
                        for i, ws in enumerate(writers)
                    ]
                counts = await asyncio.gather(*runs)
                ops = sum(counts)
                own1 = _own_cpu()
                writing = time.monotonic() - t0
                # the events still on their way: wait while they keep arriving (bounded)
                last: tuple[int, int] | None = None
                for _ in range(100):
                    events, reference, other, lost = delivered()
                    if last == (events, reference):
                        break
                    last = (events, reference)
                    await asyncio.sleep(0.2)
                drained = time.monotonic() - t0
                user1, sys1 = _cpu_seconds(server.pid)
                stages1 = await stages()
                label = level if rate is None else f"{level} offered {rate:,.0f}/s"
                results.append(
                    Result(
                        label,
                        ops,
                        writing,
                        drained,
                        latencies,
                        events - events0,
                        reference - reference0,
                        other - other0,
                        lost,
                        user1 - user0,
                        sys1 - sys0,
                        sum(_cpu_seconds(subs.pid)) - subs0,
                        own1 - own0,
                        {k: v - stages0.get(k, 0.0) for k, v in stages1.items()},
                        deflated,
                    )
                )
            for ws in writers:
                await ws.close()
        delivered(stop=True)
        return results
    finally:
        for proc in (subs, server):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)


def _us(seconds: float, ops: int) -> float:
    return seconds / max(ops, 1) * 1e6


def _report(name: str, results: list[Result], ceiling: float, core: float, subs: int) -> None:
    print(f" {name}:")
    for r in results:
        rate = r.ops / r.seconds
        lat = r.latencies
        expected = max(r.reference_events * (subs - 1), 1)
        print(
            f"  {r.level:9s} {rate:10,.0f} ops/s acked ({rate / ceiling:.1%} of the ceiling)   "
            f"ack p50 {_pct(lat, 0.5) * 1e3:6.1f} ms  p99 {_pct(lat, 0.99) * 1e3:6.1f} ms\n"
            f"            events delivered {(r.events + r.reference_events) / r.drained:,.0f}/s; "
            f"the reference subscriber decoded {r.reference_events / max(r.ops, 1):.1%} of the "
            f"ops acked as events, the others counted {r.events / expected:.2%} of that "
            f"({r.other_messages} other messages, {r.subscribers_lost} subscribers lost; "
            f"{r.deflated} took deflate)\n"
            f"            CPU per op: server {_us(r.server_cpu, r.ops):5.1f} us (user "
            f"{_us(r.server_user, r.ops):.1f}, system {_us(r.server_sys, r.ops):.1f}), "
            f"subscribers {_us(r.subscribers_cpu, r.ops):.1f} us, "
            f"writers {_us(r.writers_cpu, r.ops):.1f} us"
        )
        if r.stages:
            _report_stages(r)
    print(
        f"  core      {core:10,.0f} ops/s  (TopGunCore.handle in-process on the same "
        f"frames, {subs} subscribers, no sockets)"
    )


def _report_stages(r: Result) -> None:
    """The serving process's CPU per op acked, by stage of its main thread and by thread."""
    threads = {k: v for k, v in r.stages.items() if "thread" in k}
    calls = {k.removeprefix("calls: "): v for k, v in r.stages.items() if k.startswith("calls")}
    measured = {
        k: v for k, v in r.stages.items() if "thread" not in k and not k.startswith("calls")
    }
    main = sum(v for k, v in threads.items() if k.startswith("main"))
    rest = main - sum(measured.values())
    print("            server CPU per op by stage (main thread; thread_time, own time):")
    for stage, seconds in [*measured.items(), ("event loop, aiohttp reading, the rest", rest)]:
        print(f"              {_us(seconds, r.ops):6.2f} us  {stage}")
    for thread, seconds in threads.items():
        print(f"              {_us(seconds, r.ops):6.2f} us  {thread} (/proc, 10 ms ticks)")
    flushes = calls.get("core: fan-out encode (flush)", 0)
    print(
        f"            {r.ops / max(flushes, 1):,.0f} ops per fan-out flush "
        f"({calls.get('core: validate, records, HLC, merge, events', 0):,.0f} frames handled, "
        f"{flushes:,.0f} flushes)"
    )


async def _main(args: argparse.Namespace) -> None:
    runs: list[tuple[str, str | None, list[Result], float]] = []
    deflate = not args.plain
    trees: list[tuple[str, str | None, bool]] = [("this tree", None, deflate)]
    if args.baseline_src:
        trees.insert(0, (f"baseline {args.baseline_src}", args.baseline_src, deflate))
    if args.compare_plain:
        trees = [("this tree, subscribers without deflate", None, False), *trees]
        trees[-1] = ("this tree, subscribers with deflate", None, True)
    for name, src, compress in trees:
        results = await _measure(args, src, compress)
        total = max(sum(r.ops for r in results), 10_000)
        core = _core_rate(src, total, args.batch, args.subscribers)
        runs.append((name, src, results, core))
    total = max(sum(r.ops for _, _, res, _ in runs for r in res), 10_000)
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
        for r0, r1 in zip(before, after, strict=True):
            print(
                f"  {r0.level:9s} this tree / baseline: "
                f"{(r1.ops / r1.seconds) / (r0.ops / r0.seconds):.2f}x ops/s, "
                f"{(r1.ops / r1.server_cpu) / (r0.ops / r0.server_cpu):.2f}x ops per server "
                "CPU second"
            )
        print(f"  core      this tree / baseline: {core_after / core_before:.2f}x")
    print("  published TopGun figure: 483,000 ops/s fire-and-forget, in-process, M1 Max")
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def _parse_paced(parser: argparse.ArgumentParser, spec: str) -> list[tuple[str, float]]:
    """``LEVEL=RATE,...`` (or ``none``) into (write concern, ops/s) pairs."""
    if spec.strip().lower() == "none":
        return []
    out = []
    for item in spec.split(","):
        level, sep, rate = item.partition("=")
        if not sep or level not in ("APPLIED", "PERSISTED", "MEMORY") or not rate.isdigit():
            parser.error(f"--paced: expected LEVEL=OPS_PER_SECOND, got {item!r}")
        out.append((level, float(rate)))
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_server":
        asyncio.run(_serve(int(sys.argv[2]), sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_subs":
        asyncio.run(_subscribers(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_core":
        print(_core_in_process(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--paced",
        default="APPLIED=100000,PERSISTED=50000",
        help="after the closed-loop runs, open-loop runs offering these rates (ops/s; "
        "latency at a fixed offered load; default: the issue's targets; 'none' to skip)",
    )
    parser.add_argument(
        "--prebuild",
        type=int,
        default=None,
        help="ops the writers encode before each level's clock starts (default: 150,000 "
        "per second of --seconds; 0 builds every batch while sending)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="account the server's CPU by stage (wraps its methods: adds a little overhead)",
    )
    parser.add_argument("--quick", action="store_true", help="4 writers, 20 subscribers, 2 s")
    parser.add_argument(
        "--plain", action="store_true", help="subscribers do not offer permessage-deflate"
    )
    parser.add_argument(
        "--compare-plain",
        action="store_true",
        help="first a run with subscribers that do not offer deflate, then one with deflate, "
        "and this tree's figures against the plain run",
    )
    parser.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="also run the server from this source tree first (e.g. a main checkout's src) "
        "and print this tree's figures against it",
    )
    args = parser.parse_args()
    if args.quick:
        args.writers, args.subscribers, args.seconds = 4, 20, 2.0
    if args.prebuild is None:
        args.prebuild = int(150_000 * args.seconds)
    args.paced = _parse_paced(parser, args.paced)
    asyncio.run(_main(args))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
