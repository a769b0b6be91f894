"""Lean Syndicate clients for ``dataspace_face.py``: the protocol over a raw TCP socket.

syndicate-py spends tens of microseconds of Python per event in its actor machinery, so two
of its processes cannot feed a server that needs less: the benchmark then measures its clients.
These clients speak the same packets (gatekeeper resolve, ``Observe`` with a ``<group <rec ...>>``
pattern, assert/retract/message turns ending in a sync) with ``wire.preserves_fast`` and no
actors: a publisher writes ``window`` turns ahead and sends the next when a sync comes back; an
observer counts what arrives. The figures they print are the ones syndicate-py's roles print.
"""

from __future__ import annotations

import argparse
import select
import socket
import time
from collections.abc import Callable
from typing import Any

import preserves
from preserves import Embedded, Record, Symbol

from octosync.wire.preserves_fast import encode
from octosync.wire.syndicate import PacketStream

A, R, M, S = Symbol("A"), Symbol("R"), Symbol("M"), Symbol("S")
ITEM, TICK, TIMING = Symbol("Item"), Symbol("Tick"), Symbol("Timing")
GATEKEEPER_ANSWER, SYNC_PEER, ENTITY = 1, 2, 3
"""The OIDs this client exports: the resolve's observer, the sync peer, the observers' entity."""


def _ref(oid: int) -> Embedded:
    return Embedded((0, oid))


class Conn:
    """One TCP connection to the dataspace face, resolved to its dataspace's OID."""

    def __init__(self, address: tuple[str, int], ref_text: str) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stream = PacketStream(1 << 30)
        self.handle = 0
        request = Record(Symbol("resolve"), [preserves.parse(ref_text), _ref(GATEKEEPER_ANSWER)])
        self.send([(0, Record(A, [request, self.next_handle()]))])
        while True:
            for oid, event in self.events(block=True):
                if oid == GATEKEEPER_ANSWER and event.key == A:
                    answer = event.fields[0]
                    if answer.key != Symbol("accepted"):
                        raise SystemExit(f"rejected: {answer}")
                    self.ds = answer.fields[0].embeddedValue.oid
                    return

    def next_handle(self) -> int:
        self.handle += 1
        return self.handle

    def send(self, turn: list[tuple[int, Record]]) -> None:
        self.sock.sendall(encode(tuple(turn)))

    def events(self, block: bool) -> list[tuple[int, Record]]:
        """The turn events that arrived (waits for some when ``block``)."""
        if not block and not select.select([self.sock], [], [], 0)[0]:
            return []
        data = self.sock.recv(1 << 20)
        if not data:
            raise SystemExit("the server closed the connection")
        out: list[tuple[int, Record]] = []
        for packet in self.stream.feed(data):
            if type(packet.value) is tuple:  # a turn
                out.extend(packet.value)  # type: ignore[attr-defined]
        return out


Report = Callable[[dict[str, Any]], None]


def _pattern(label: Symbol, i: int, arity: int) -> Record:
    entries = {0: Record(Symbol("lit"), [i])}
    for k in range(1, arity):
        entries[k] = Record(Symbol("bind"), [Record(Symbol("_"), [])])
    return Record(Symbol("group"), [Record(Symbol("rec"), [label]), entries])


def role_observer(args: argparse.Namespace, address: tuple[str, int], report: Report) -> None:
    stats: dict[str, Any] = {"adds": 0, "removes": 0, "messages": 0, "latencies": []}
    report(stats)
    conn = Conn(address, args.ref)
    observe = Symbol("Observe")
    turn = []
    for i in range(args.first, args.first + args.count):
        for label, arity in ((ITEM, 2), (TICK, 2), (TIMING, 1)):
            pattern = Record(observe, [_pattern(label, i, arity), _ref(ENTITY)])
            turn.append((conn.ds, Record(A, [pattern, conn.next_handle()])))
    turn.append((conn.ds, Record(S, [_ref(SYNC_PEER)])))
    conn.send(turn)
    ready = False
    timing = False
    while True:
        for oid, event in conn.events(block=True):
            key = event.key
            if oid == SYNC_PEER and not ready:
                ready = True
                print("ready", flush=True)
            elif key == A:
                stats["adds"] += 1
                if timing:
                    stats["latencies"].append(time.monotonic() - event.fields[0][0])
            elif key == R:
                stats["removes"] += 1
            elif key == M:
                body = event.fields[0]
                if len(body) == 1:
                    stats["messages"] += 1
                else:
                    timing = True  # a <Timing i> message: the latency phase started


def role_publisher(args: argparse.Namespace, address: tuple[str, int], report: Report) -> None:
    stats: dict[str, Any] = {"pairs": 0, "messages": 0}
    report(stats)
    conn = Conn(address, args.ref)
    ds, n = conn.ds, args.observers
    deadline = time.monotonic() + args.seconds
    print("ready", flush=True)  # the parent times the phase from here
    k = args.offset
    sync = (ds, Record(S, [_ref(SYNC_PEER)]))

    def turn_of(kind: str, count: int) -> list[tuple[int, Record]]:
        nonlocal k
        turn = []
        for _ in range(count):
            i = k % n
            k += 1
            if kind == "pairs":
                h = conn.next_handle()
                turn.append((ds, Record(A, [Record(ITEM, [i, time.monotonic()]), h])))
                turn.append((ds, Record(R, [h])))
            else:
                turn.append((ds, Record(M, [Record(TICK, [i, time.monotonic()])])))
        turn.append(sync)
        return turn

    if args.phase in ("pairs", "messages"):
        for _ in range(args.window):
            conn.send(turn_of(args.phase, args.batch))
        while True:
            for oid, _event in conn.events(block=True):
                if oid != SYNC_PEER:
                    continue
                if time.monotonic() < deadline:
                    stats[args.phase] += args.batch
                    conn.send(turn_of(args.phase, args.batch))
        return
    # latency: paced pairs, ``args.rate`` per second from this publisher, each pair its own turn
    conn.send([(ds, Record(M, [Record(TIMING, [i])])) for i in range(n)])
    step = 0.005
    start = time.monotonic()
    ticks = 0
    while time.monotonic() < deadline:
        ticks += 1
        due = int(ticks * step * args.rate)  # the pairs owed by now: exactly ``rate`` per second
        for _ in range(due - stats["pairs"]):
            conn.send(turn_of("pairs", 1)[:-1])
        stats["pairs"] = due
        conn.events(block=False)
        time.sleep(max(0.0, start + ticks * step - time.monotonic()))
    while True:
        conn.events(block=True)


def run(role: str, args: argparse.Namespace, report: Report) -> None:
    """``role`` for ``dataspace_face.py``'s child process; ``args.address`` is ``<tcp "H" P>``;
    ``report(stats)`` prints ``stats`` when the parent asks."""
    value = preserves.parse(args.address)
    address = (value.fields[0], value.fields[1])
    if role == "observer":
        role_observer(args, address, report)
    else:
        role_publisher(args, address, report)
