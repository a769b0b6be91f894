"""Everything the faces share in one process: the hub, the flusher, signaling, counters, links."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from octosync.cluster.core import ClusterCore
from octosync.cluster.maps import MapStats
from octosync.errors import InternalError, OctosyncError
from octosync.hub import Hub, HubConfig, OutboxLimits
from octosync.hub.model import lazily_frame
from octosync.hub.policy import CLOSE_GOING_AWAY
from octosync.hub.streams import map_name_of, map_stream_id
from octosync.hub.types import AcceptHook, InterestHook, Recorder, ReleaseHook
from octosync.ipc.messages import Delta, Snapshot
from octosync.server.config import ServerConfig
from octosync.server.dataspace_key import load_or_create_secret
from octosync.server.face_names import FaceName
from octosync.server.flusher import Flusher, writable
from octosync.server.guard import ConnectionGuard, default_max_connections
from octosync.server.view_encoders import view_encoders
from octosync.signaling import SignalingHub
from octosync.store.hub_hook import Prepared
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import EncodedRecord
from octosync.syndicate import Relay
from octosync.topgun import Effects, Outbound, TopGunCore
from octosync.topgun.core import SERVER_NODE
from octosync.topgun.offload import MAX_RUNNING as MAX_OFFLOADED
from octosync.topgun.offload import OffLoop
from octosync.wire.websocket import DEFLATE_MIN_BYTES, FrameDeflater, ws_frame, ws_frame_header

log = logging.getLogger(__name__)

STALL_BOUNDS = (0.005, 0.010, 0.050, 0.100, 1.0)
TOPGUN_FLUSH_GAP = 0.005
"""Seconds between two TopGun fan-outs at most once per this gap: under load the events of
many client batches share one message per subscriber; an idle server is not delayed."""
DEFLATE_SHARED = 2
"""A message is compressed when at least this many of its targets negotiated deflate."""
SPLIT_WRITE_BYTES = 64 * 1024
SPLIT_WRITE_TARGETS = 2
"""A plain message this large for this few targets is written as header then payload: two
writes are cheaper than copying the payload behind its header (a writer's events, which
leave out its own, go to it alone)."""


@dataclass(slots=True)
class FaceCounters:
    connections: int = 0
    frames_in: int = 0
    bytes_in: int = 0
    errors: int = 0


@dataclass(slots=True)
class Counters:
    faces: dict[FaceName, FaceCounters] = field(
        default_factory=lambda: {f: FaceCounters() for f in FaceName}
    )
    refused_upgrades: int = 0
    """Upgrades answered 401 (no or bad credentials)."""
    deadline_closes: int = 0
    """Connections closed for sending no request or handshake in time."""
    loop_lag_max: float = 0.0
    """Longest event-loop stall seen (seconds): how long one callback kept everyone waiting."""
    loop_stalls: dict[float, int] = field(default_factory=lambda: dict.fromkeys(STALL_BOUNDS, 0))
    """Stalls longer than each bound (seconds), counted."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LiveConnection(Protocol):
    """What the runtime needs of a connection (``server.connection.ServedConnection``)."""

    @property
    def transport(self) -> asyncio.BaseTransport: ...

    @property
    def session_face(self) -> FaceName: ...

    @property
    def deflate(self) -> bool:
        """Takes permessage-deflate frames (``wire.websocket.FrameDeflater``'s)."""

    def fault(self, err: OctosyncError) -> None: ...

    def close_soon(self, code: int) -> None: ...

    async def close(self, code: int) -> None: ...

    def abort(self) -> None: ...


class Replicator(Protocol):
    """Stores TopGun op records in the cluster (``links.cluster_maps.MapsLink``)."""

    @property
    def stats(self) -> MapStats: ...

    @property
    def position(self) -> int:
        """The cluster op stream's sequence this node has taken up to."""
        ...

    def replicate(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None] | None
    ) -> None: ...


class HttpConnection(Protocol):
    def request_started(self) -> None: ...


class Runtime:
    def __init__(
        self,
        config: ServerConfig,
        on_accept: AcceptHook | None = None,
        recorder: Recorder | None = None,
        on_release: ReleaseHook | None = None,
        on_interest: InterestHook | None = None,
        writer: GroupCommitWriter | None = None,
        *,
        node_id: str | None = None,
    ) -> None:
        """``node_id``: this node's id in a cluster, also its TopGun HLC's (servers of one
        cluster must never stamp alike)."""
        self.config = config
        self.writer = writer
        """The journal's writer (TopGun ops are journaled through it); None: no journal."""
        self.limits = config.limits()
        self.hub = Hub(
            HubConfig(
                outbox=OutboxLimits(
                    max_bytes=config.outbox_max_bytes, max_frames=config.outbox_max_frames
                ),
                limits=self.limits,
                retain_after_producer_leaves=config.retain_after_producer_leaves,
                coalesce_backlog=config.coalesce_backlog,
                max_replay_diffs=config.max_replay_diffs,
            ),
            clock=time.monotonic,
            encoders=view_encoders(),
            on_accept=on_accept,
            on_release=on_release,
            on_interest=on_interest,
            recorder=recorder,
        )
        self.flusher = Flusher(self.hub, high_water=config.socket_high_water, on_fault=self._fault)
        self.signaling = SignalingHub(config.signaling)
        self.topgun = TopGunCore(
            _wall_ms,
            persistent=writer is not None,
            gc_age_ms=None if config.topgun_gc_age is None else int(config.topgun_gc_age * 1000),
            gc_every_ms=int(config.topgun_gc_interval * 1000),
            node_id=node_id or SERVER_NODE,
            search_maps=config.topgun_search,
            vector_maps=config.topgun_vectors,
            sql=config.topgun_sql,
        )
        self.topgun.queries.per_connection = config.topgun_queries_per_connection
        self.topgun.queries.per_map = config.topgun_queries_per_map
        self.replicator: Replicator | None = None
        self._offloaded = 0
        """Off-loop TopGun requests (SQL) running now."""
        """Where TopGun op records go to be stored by the cluster (``--cluster``)."""
        self.counters = Counters()
        self._topgun_flush_due = False
        self._topgun_flushed_at = float("-inf")
        self._deflater = FrameDeflater()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._commit_inbox: deque[
            tuple[int, concurrent.futures.Future[list[int]], Callable[[], None]]
        ] = deque()
        self._commit_drain_due = False
        self.durable_listeners: dict[int, Callable[[object, int], None]] = {}
        """Producers that asked to learn how far their stream is journaled (``OutboxAck``):
        called on the loop with ``(stream, epoch)`` once per commit that reached further."""
        self._durable_due: dict[int, tuple[object, int]] = {}
        self.links: dict[int, LiveConnection] = {}
        self.guard = ConnectionGuard(
            max_total=default_max_connections(config.max_connections),
            max_per_address=config.max_connections_per_address,
        )
        self.http_conns: dict[asyncio.BaseTransport, HttpConnection] = {}
        """Open HTTP connections by transport (``server.guard``), to lift their deadline."""
        self.closing = False
        self.cluster: ClusterCore | None = None
        """The cluster's core when the server joined one (``--cluster``), for metrics."""
        self._relay: Relay | None = None
        self.relay_framing: dict[int, Callable[[bytes], bytes]] = {}
        """Each dataspace connection's transport framing (WebSocket message or raw TCP)."""
        self._ids = itertools.count(1)
        self._expiry: asyncio.Task[None] | None = None
        self._lag: asyncio.Task[None] | None = None

    @property
    def relay(self) -> Relay:
        """The dataspace face's relay, made with the server's sturdy-ref secret on first use."""
        if self._relay is None:
            secret = self.config.dataspace_secret
            if secret is None:
                secret = load_or_create_secret(self.config.data_dir)
            self._relay = Relay(secret)
        return self._relay

    def started_relay(self) -> Relay | None:
        """The dataspace relay if the face has been used (the inspector lists it); never
        creates it (that would make the sturdy-ref key file)."""
        return self._relay

    def new_conn_id(self) -> int:
        return next(self._ids)

    def attach(self, conn: int, link: LiveConnection) -> None:
        self.links[conn] = link
        self.flusher.attach(conn, link.transport)
        self.counters.faces[link.session_face].connections += 1

    def detach(self, conn: int) -> None:
        link = self.links.pop(conn, None)
        self.flusher.detach(conn)
        if link is not None:
            self.counters.faces[link.session_face].connections -= 1

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """A complete HTTP request arrived on ``transport``: its request deadline is met."""
        conn = None if transport is None else self.http_conns.get(transport)
        if conn is not None:
            conn.request_started()

    def offload(self, job: OffLoop) -> None:
        """Run ``job`` on a worker thread and send what it returns to its connection (at most
        ``offload.MAX_RUNNING`` at once; beyond that the job's own "busy" answer goes now)."""
        if self._offloaded >= MAX_OFFLOADED:
            self._answer(job, job.busy())
            return
        self._offloaded += 1
        done = asyncio.get_running_loop().run_in_executor(None, job.run)

        def answer(result: asyncio.Future[list[bytes]]) -> None:
            self._offloaded -= 1
            try:
                messages = result.result()
            except Exception:
                log.exception("an off-loop TopGun request failed")
                messages = []
            self._answer(job, messages)

        done.add_done_callback(answer)

    def _answer(self, job: OffLoop, messages: list[bytes]) -> None:
        if messages:
            self.deliver(job.conn, *(ws_frame(m, text=False) for m in messages))
        if job.after is not None:
            job.after()

    def deliver(self, conn: int, *data: bytes) -> None:
        """Write ``data`` (one frame, or its parts in order) to another connection now; a peer
        that cannot keep up is dropped, never waited for."""
        link = self.links.get(conn)
        t = None if link is None else writable(link.transport)
        if link is None or t is None:
            return
        if t.get_write_buffer_size() > self.config.socket_high_water:
            link.abort()
            return
        for part in data:
            t.write(part)

    def deliver_all(self, out: Sequence[Outbound]) -> None:
        """TopGun messages for other connections: framed once and written to each target. A
        large message shared by several targets that negotiated deflate is compressed once
        for them (``DEFLATE_SHARED``); one for a single connection goes plain (compressing
        it would cost the loop as much as the write it saves)."""
        links = self.links
        for ob in out:
            targets = ob.targets
            if len(targets) >= DEFLATE_SHARED and len(ob.data) >= DEFLATE_MIN_BYTES:
                packed = [t for t in targets if (link := links.get(t)) is not None and link.deflate]
                if len(packed) >= DEFLATE_SHARED:
                    frame = self._deflater.frame(ob.data)
                    for target in packed:
                        self.deliver(target, frame)
                    if len(packed) == len(targets):
                        continue
                    took = set(packed)
                    targets = tuple(t for t in targets if t not in took)
            if len(ob.data) >= SPLIT_WRITE_BYTES and len(targets) <= SPLIT_WRITE_TARGETS:
                parts = (ws_frame_header(len(ob.data), text=False), ob.data)
                for target in targets:
                    self.deliver(target, *parts)
                continue
            data = ws_frame(ob.data, text=False)
            for target in targets:
                self.deliver(target, data)

    def follow_map(self, stream: str) -> None:
        """A lazily client asked for ``map:<name>``: the server starts producing it (once)."""
        name = map_name_of(stream)
        if name is None:
            return
        snapshot = self.topgun.follow_map(name)
        if snapshot is not None:
            self.hub.publish_from_server(stream, lazily_frame(snapshot))

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None:
        """The ``map:`` streams' frames the TopGun core made, into the hub."""
        for name, msg in frames:
            self.hub.publish_from_server(map_stream_id(name), lazily_frame(msg))

    def flush_topgun_soon(self) -> None:
        """Send the TopGun events applied so far, all at once: at the end of this event-loop
        turn, or, when the last fan-out went out less than ``TOPGUN_FLUSH_GAP`` ago, once that
        gap has passed. An idle server sends an event at once; a busy one sends fewer, larger
        messages (each fan-out costs a write per subscriber, whatever it carries)."""
        if not self._topgun_flush_due and self.topgun.has_pending_events():
            self._topgun_flush_due = True
            loop = asyncio.get_running_loop()
            wait = self._topgun_flushed_at + TOPGUN_FLUSH_GAP - loop.time()
            if wait > 0:
                loop.call_later(wait, self._flush_topgun)
            else:
                loop.call_soon(self._flush_topgun)

    def _flush_topgun(self) -> None:
        self._topgun_flush_due = False
        self._topgun_flushed_at = asyncio.get_running_loop().time()
        self.apply_topgun(self.topgun.flush())
        self.flush_topgun_soon()  # queries or vectors left to update: a turn at a time

    def apply_topgun(self, fx: Effects) -> None:
        """TopGun effects that no session sends (lock expiry, a disconnect, the GC): ``out``
        now, ``durable`` once ``records`` are committed."""
        self.deliver_all(fx.out)
        self.publish_map_frames(fx.frames)
        for job in fx.offload:
            self.offload(job)
        if fx.replicate and self.replicator is not None:
            self.replicator.replicate(0, fx.replicate, None)
        if self.writer is None or not (fx.records or fx.durable):
            self.deliver_all(fx.durable)
            return
        durable = list(fx.durable)
        try:
            self.after_commit(0, fx.records, lambda: self.deliver_all(durable))
        except OctosyncError as err:  # the writer is full: these grants time out client-side
            log.warning("TopGun effects not journaled, not sent: %s", err)

    def after_commit(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None]
    ) -> None:
        """Journal ``records`` and call ``then`` on the loop once they, and everything queued
        before them, are committed (an empty list is a barrier). Submitted at once, so the
        writer thread commits while the loop goes on (it groups whatever queued meanwhile). A
        failed commit resets the connection: what it was told nothing about, it resends.

        Commits come back through one inbox: the writer thread wakes the loop once for all
        the submissions one commit settles, not once each (a wake-up is a syscall and a loop
        turn, and each turn flushes a smaller fan-out)."""
        assert self.writer is not None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        future = self.writer.submit_encoded(records, block=False)
        future.add_done_callback(lambda f: self._committed(conn, f, then))

    def watch_frame(self, future: concurrent.futures.Future[list[int]], frame: Prepared) -> None:
        """A producer's frame was queued for the journal: tell the producer once it is
        committed (if it asked), reset it if the commit failed."""
        conn, stream, epoch = int(frame.conn), frame.stream, frame.epoch
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

        def durable() -> None:
            due = self._durable_due.get(conn)
            if due is None or due[1] < epoch:
                self._durable_due[conn] = (stream, epoch)

        future.add_done_callback(lambda f: self._committed(conn, f, durable))

    def _committed(
        self, conn: int, f: concurrent.futures.Future[list[int]], then: Callable[[], None]
    ) -> None:
        """On the writer thread: queue the outcome; wake the loop unless a wake-up is due."""
        self._commit_inbox.append((conn, f, then))
        if not self._commit_drain_due:
            self._commit_drain_due = True
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._drain_commits)

    def _drain_commits(self) -> None:
        """On the loop, in commit order: each committed submission's ``then``, or a reset of
        its connection when the commit failed. (The flag drops before the inbox is read, so
        an outcome queued meanwhile is read now or wakes the loop again.)"""
        self._commit_drain_due = False
        inbox = self._commit_inbox
        while inbox:
            conn, f, then = inbox.popleft()
            exc = f.exception()
            if exc is None:
                then()
            elif isinstance(exc, OctosyncError):
                self._fault(conn, exc)
            else:
                self._fault(conn, InternalError(f"journal commit failed: {exc}"))
        if self._durable_due:  # one durability ack per producer per drain, the furthest
            due, self._durable_due = self._durable_due, {}
            for conn, (stream, epoch) in due.items():
                listener = self.durable_listeners.get(conn)
                if listener is not None:
                    listener(stream, epoch)

    def _fault(self, conn: int, err: OctosyncError) -> None:
        link = self.links.get(conn)
        if link is not None:
            link.fault(err)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._expiry = loop.create_task(self._expire_loop())
        self._lag = loop.create_task(self._lag_probe())

    async def _lag_probe(self, period: float = 0.005) -> None:
        """Sleep ``period`` over and over; oversleeping is time some callback held the loop."""
        loop = asyncio.get_running_loop()
        counters = self.counters
        while True:
            before = loop.time()
            await asyncio.sleep(period)
            lag = loop.time() - before - period
            if lag > counters.loop_lag_max:
                counters.loop_lag_max = lag
            if lag > STALL_BOUNDS[0]:
                for bound in STALL_BOUNDS:
                    if lag > bound:
                        counters.loop_stalls[bound] += 1

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.hub.expire()
            self.apply_topgun(self.topgun.tick())

    async def shutdown(self) -> None:
        """Stop taking work, flush until the deadline, close everyone, drop who is stuck.

        A subscriber that stopped reading cannot hold the process: at ``shutdown_deadline`` the
        remaining connections are asked to close, and ``close_timeout`` later any transport
        still open is aborted.
        """
        self.closing = True
        for task in (self._expiry, self._lag):
            if task is not None:
                task.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_deadline
        self.flusher.flush_all()
        while self.flusher.pending() and loop.time() < deadline:
            await asyncio.sleep(0.01)
            self.flusher.flush_all()
        links = list(self.links.values())
        for link in links:
            link.close_soon(CLOSE_GOING_AWAY)
        deadline = loop.time() + self.config.close_timeout
        while any(not link.transport.is_closing() for link in links) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for link in links:
            if not link.transport.is_closing():
                link.abort()
