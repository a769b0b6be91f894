"""asyncio client for multi-writer streams: a shared document of counters, registers and maps.

::

    async with octosync.client.open_document("ws://127.0.0.1:8765", "board") as doc:
        clicks = doc.counter("clicks")
        clicks.add(1)                      # merged with every other writer's additions
        clicks.on_change(print)            # now, and after every change
        await doc.synced()                 # every local edit acknowledged (journaled)

The document joins the stream over ``/lazily`` with the ``distributed_crdt`` feature. Edits
apply locally at once and are sent as CRDT ops; each stays pending until the server echoes it
back, which it does only after its journal committed it. Edits made while disconnected are
kept, and sent again (with every still pending one) on reconnect; the server's whole state
arrives first on every connection, so an offline replica converges. Given a cluster's other
nodes as ``fallbacks``, a document that loses its node goes on with the next one: every node keeps
the whole document, and pending edits merge idempotently wherever they land. The cells are ordinary
cells of ``doc.context`` (``crdt.replicated``): memos and effects read them like any cell.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import aiohttp

from octosync.client.lazily import _DROPPED, Backoff, lazily_url, remote_error
from octosync.client.ws import close_ws, connect_ws
from octosync.crdt.entries import EPHEMERAL_KINDS
from octosync.crdt.plane import stamp_key
from octosync.crdt.replicated import (
    Replicated,
    ReplicatedCell,
    ReplicatedList,
    ReplicatedPresence,
    ReplicatedText,
)
from octosync.crdt.shared import SharedState
from octosync.errors import (
    AuthError,
    ElementCollected,
    Forbidden,
    HandshakeFailed,
    OctosyncError,
)
from octosync.graph import Context
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION
from octosync.ipc.messages import MAX_SAFE_ID, CrdtOp, CrdtSync, Handshake
from octosync.wire import DIALECTS

_JSON = DIALECTS["json"]
_FATAL = (AuthError, Forbidden, HandshakeFailed)
"""Refusals a reconnect cannot change."""
FRAME_OPS = 500
"""Ops per frame this client sends, at most (a long paste is many chunk entries)."""
_RETRIED: tuple[type[BaseException], ...] = (*_DROPPED, TimeoutError)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def new_peer_id() -> int:
    """A fresh replica id: random, so two replicas never write one counter entry."""
    return random.SystemRandom().randrange(1, MAX_SAFE_ID)


class SharedDocument:
    """One replica of a multi-writer stream, kept in sync over a reconnecting WebSocket."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        token: str | None = None,
        fallbacks: Sequence[str] = (),
        peer: int | None = None,
        context: Context | None = None,
        clock: Callable[[], int] = _wall_ms,
        backoff: Backoff | None = None,
        heartbeat: float = 10.0,
        report_every: float = 1.0,
    ) -> None:
        self.urls = (lazily_url(url), *map(lazily_url, fallbacks))
        """Where to connect, in turn (other nodes of a cluster as ``fallbacks``): a session
        that fails moves on to the next."""
        self._node = 0
        self.name = name
        self.token = token
        self.peer = peer if peer is not None else new_peer_id()
        self.context = context or Context()
        self.cells = Replicated(self.context, SharedState(self.peer, clock))
        self.cells.on_local = self._local
        self.backoff = backoff or Backoff()
        self.heartbeat = heartbeat
        """Seconds between two resends of this replica's presence and awareness values (the
        server drops a value not set again within its TTL, 30 s by default)."""
        self.report_every = report_every
        """Seconds between two reports of what this replica has seen at most (the server
        collects tombstones once every writer has seen them: ``crdt/collect.py``)."""
        self._report_due = False
        self._reported = 0.0
        self._snapshot: set[tuple[int, str]] | None = None
        self._careful = False
        """After a refused frame: pending edits go one at a time, each acknowledged or
        refused before the next, so a refusal names its edit (see ``_refused``)."""
        self._probe: CrdtOp | None = None
        self._held: dict[tuple[int, str], CrdtOp] = {}
        """While careful: the server's entries as the whole document brought them."""
        self._on_error: list[Callable[[OctosyncError], object]] = []
        self.pending: dict[tuple[int, str], CrdtOp] = {}
        """Local ops the server has not acknowledged yet, by entry (the latest one each)."""
        self.errors: list[OctosyncError] = []
        self.connected = False
        self.reconnects = 0
        """Sessions after the first (the server went away, or the connection did)."""
        self._sessions = 0
        self._outbox: list[CrdtOp] = []
        self._changed = asyncio.Event()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._task: asyncio.Task[None] | None = None
        self._failed: OctosyncError | None = None
        self._joined = False
        self._closing = False
        self._rng = random.Random()

    @property
    def url(self) -> str:
        """The ``/lazily`` URL the document is (or will next be) connected to."""
        return self.urls[self._node % len(self.urls)]

    @url.setter
    def url(self, url: str) -> None:
        """Follow one server from the next session on (one that moved, say)."""
        self.urls = (lazily_url(url),)
        self._node = 0

    # --- the values -------------------------------------------------------------------------

    def counter(self, name: str) -> ReplicatedCell[int]:
        return self.cells.counter(name)

    def register(self, name: str) -> ReplicatedCell[Any]:
        return self.cells.register(name)

    def multi(self, name: str) -> ReplicatedCell[tuple[Any, ...]]:
        return self.cells.multi(name)

    def map(self, name: str) -> ReplicatedCell[dict[str, Any]]:
        return self.cells.map(name)

    def list(self, name: str) -> ReplicatedList:
        return self.cells.list(name)

    @property
    def presence(self) -> ReplicatedPresence:
        """Each connection's presence (``set``, ``all``, ``others``, ``on_change``)."""
        return self.cells.presence()

    def awareness(self, name: str) -> ReplicatedPresence:
        """An awareness value such as a cursor: each peer's latest, until the server's TTL."""
        return self.cells.awareness(name)

    def text(self, name: str) -> ReplicatedText:
        return self.cells.text(name)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> SharedDocument:
        if self._task is None:
            self._closing = False
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aenter__(self) -> SharedDocument:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        task, self._task = self._task, None
        self._closing = True
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.connected = False  # a later start() is synced only once its own session joined
        self._joined = False

    async def synced(self, timeout: float = 30.0) -> None:
        """Wait until the server's state arrived and every local edit is acknowledged."""
        await self.wait_until(lambda: self._joined and self.connected and not self.pending, timeout)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = 30.0) -> None:
        """Wait until ``predicate()`` holds (checked after every change of the document)."""
        async with asyncio.timeout(timeout):
            while not predicate():
                if self._failed is not None:
                    raise self._failed
                self._changed.clear()
                await self._changed.wait()

    def on_error(self, callback: Callable[[OctosyncError], object]) -> None:
        """Call ``callback(error)`` for each error the server or this replica reports (also
        kept in ``errors``): an edit the server refused is dropped, and told here."""
        self._on_error.append(callback)

    # --- internals --------------------------------------------------------------------------

    def _report(self, error: OctosyncError) -> None:
        self.errors.append(error)
        for callback in self._on_error:
            callback(error)

    def _notify(self) -> None:
        self._changed.set()

    def _local(self, op: CrdtOp) -> None:
        if _ephemeral(op):  # not pending: never acknowledged, set again on reconnect
            if self.connected:
                self._outbox.append(op)
                self._notify()
            return
        self.pending[(op.slot_id, op.key or "")] = op
        if self.connected:
            self._outbox.append(op)
            self._notify()

    def _acked(self, ops: tuple[CrdtOp, ...]) -> None:
        for op in ops:
            if op.stamp.peer != self.peer:
                continue
            key = (op.slot_id, op.key or "")
            held = self.pending.get(key)
            if held is not None and stamp_key(held.stamp) <= stamp_key(op.stamp):
                del self.pending[key]

    def _drop(self, op: CrdtOp, error: OctosyncError) -> None:
        """The server refused ``op``: out of pending (``synced()`` no longer waits for it),
        told to the application, and undone here (its entry as the server holds it)."""
        self._probe = None
        if self.pending.get(_key(op)) is op:
            del self.pending[_key(op)]
        self._report(error)
        self.cells.restore_entry(op, self._held.get(_key(op)))
        self._notify()

    def _retake(self, snapshot: set[tuple[int, str]]) -> None:
        """Drop what was collected while away, and the pending edits of those elements: the
        server refuses them (``ElementCollected``), so they would stay pending forever."""
        for op in self.cells.retake(snapshot):
            key = (op.slot_id, op.key or "")
            mine = self.pending.pop(key, None)
            if mine is not None:
                self._report(
                    ElementCollected(
                        f"this edit of {op.key!r} was dropped: the element was removed and "
                        f"collected while this replica was away",
                        path="pending",
                    )
                )
        self._outbox = [
            op
            for op in self._outbox
            if (op.slot_id, op.key or "") in self.pending or _ephemeral(op)
        ]

    def _handshake(self) -> bytes:
        return _JSON.encode_handshake(
            Handshake(
                protocol_id=PROTOCOL_ID,
                protocol_major_version=PROTOCOL_MAJOR_VERSION,
                codec="json",
                max_frame_size=1 << 20,
                fragmentation_supported=False,
                ordered_reliable=True,
                peer_id=self.peer,
                session_id=self.name,
                features=(FEATURE,),
            )
        )

    async def _run(self) -> None:
        attempt = 0
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    await self._session(http)
                    attempt = 0
                except _FATAL as exc:
                    self._failed = exc
                    self._notify()
                    return
                except _RETRIED:
                    # aiohttp may turn a cancellation inside its connect into a timeout
                    if self._closing:
                        return
                self.connected = False
                self._joined = False
                self._notify()
                self._node += 1  # the next node, when there are several
                delay = self.backoff.delay(attempt, self._rng)
                attempt += 1
                await asyncio.sleep(delay)

    async def _session(self, http: aiohttp.ClientSession) -> None:
        ws = await connect_ws(http, self.url, self.token, max_msg_size=0)
        try:
            await ws.send_bytes(self._handshake())
            reply = await ws.receive()
            if reply.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                raise ConnectionError("the server closed before its handshake reply")
            refused = remote_error(reply.data)
            if refused is not None:
                raise refused
            self.reconnects = self._sessions
            self._sessions += 1
            self.connected = True
            self._joined = False  # until this session's document has arrived
            self._snapshot = set()
            self._probe = None
            self._held = {}
            pending = sorted(self.pending.values(), key=lambda o: stamp_key(o.stamp))
            self._outbox = [] if self._careful else pending
            self._outbox += self._ephemeral_ops()
            loop = asyncio.get_running_loop()
            sender = loop.create_task(self._send(ws))
            beats = loop.create_task(self._heartbeats())
            try:
                await self._receive(ws)
            finally:
                for task in (sender, beats):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            self._ws = None
            await close_ws(ws, None)

    def _ephemeral_ops(self) -> tuple[CrdtOp, ...]:
        """This replica's presence and awareness values, freshly stamped."""
        state = self.cells.state
        return tuple(
            state.set_ephemeral(v.name, v.kind, v.wanted)
            for v in self.cells.ephemeral_values()
            if v.wanted is not None
        )

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            ops = self._ephemeral_ops()
            if ops:
                self._outbox += ops
                self._notify()

    async def _send(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Ops first, in order; then, when some came since, what this replica has seen (its
        frontier, after the ops it sent: the server takes it as a promise that no op of this
        replica made before it is still to come)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._careful:
                # nothing else in flight (presence waits for the next heartbeat), so a
                # refusal can only be the probe's
                self._outbox = []
                if self._joined and self._probe is None and self.pending:
                    self._probe = min(self.pending.values(), key=lambda o: stamp_key(o.stamp))
                    self._outbox.append(self._probe)
                elif self._joined and self._probe is None:
                    self._careful = False  # every pending edit settled: pipelined again
                    self._held = {}
            if self._outbox:
                ops, self._outbox = tuple(self._outbox[:FRAME_OPS]), self._outbox[FRAME_OPS:]
                await ws.send_bytes(_JSON.encode(CrdtSync(ops=ops)))
                continue
            wait = None
            if self._report_due and self._joined:
                wait = self._reported + self.report_every - loop.time()
                if wait <= 0:
                    self._report_due = False
                    self._reported = loop.time()
                    frontier = self.cells.state.replica.frontier()
                    await ws.send_bytes(_JSON.encode(CrdtSync(frontier=frontier)))
                    continue
            self._changed.clear()
            # a timer, not wait_for: a cancel landing as the wait ends must not be swallowed
            timer = None if wait is None else loop.call_later(wait, self._changed.set)
            try:
                await self._changed.wait()
            finally:
                if timer is not None:
                    timer.cancel()

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break
            error = remote_error(msg.data)
            if error is not None:
                refused = _refusal(error)
                if refused and self._probe is not None:
                    self._drop(self._probe, error)  # the one edit in flight: it was refused
                    continue
                if refused:  # which edit is unknown while several are in flight: resend them
                    self._careful = True  # singly, and report the one refused again
                    raise ConnectionError("a frame was refused: resending its edits singly")
                self._report(error)
                if isinstance(error, _FATAL):
                    raise error
                continue
            sync = _JSON.decode(msg.data.encode() if isinstance(msg.data, str) else msg.data)
            if not isinstance(sync, CrdtSync):
                continue
            self.cells.merge(sync.ops)
            self._acked(sync.ops)
            probe = self._probe
            if probe is not None and self.pending.get(_key(probe)) is not probe:
                self._probe = None  # acknowledged (or replaced by a newer edit)
            if self._careful:
                self._held.update((_key(op), op) for op in sync.ops)
            if self._snapshot is not None:
                self._snapshot.update((op.slot_id, op.key or "") for op in sync.ops)
            if sync.frontier is not None:  # the last frame of the document sent at joining
                self._joined = True
                if self._snapshot is not None:
                    self._retake(self._snapshot)
                    self._snapshot = None
            self._report_due = True
            self._notify()
        raise ConnectionError("the server closed the connection")


def _key(op: CrdtOp) -> tuple[int, str]:
    return (op.slot_id, op.key or "")


def _refusal(error: OctosyncError) -> bool:
    """The server refused one frame of this replica's ops, naming an op (``ops[i]...``):
    its other frames and the connection go on."""
    return (error.path or "").startswith("ops[")


def _ephemeral(op: CrdtOp) -> bool:
    parts = (op.key or "").split("/")
    return len(parts) == 3 and parts[1] in EPHEMERAL_KINDS


def open_document(url: str, name: str, **options: Any) -> SharedDocument:
    """A shared document (not started: ``async with`` it, or ``await doc.start()``)."""
    return SharedDocument(url, name, **options)
