"""Everything the faces share in one process: the hub, the flusher, signaling, counters, links.

Sessions do not see the runtime: each gets its face's port (``server.ports``), which the
runtime implements for the hub faces, signaling and the dataspace, and ``TopGunFace``
(``server.topgun_face``) for TopGun."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from octosync.cluster.core import ClusterCore
from octosync.errors import OctosyncError
from octosync.hub import Hub, HubConfig, OutboxLimits
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.policy import CLOSE_GOING_AWAY
from octosync.hub.types import AcceptHook, InterestHook, Recorder, ReleaseHook
from octosync.server.auth import ClaimGrants, authenticate
from octosync.server.commit import Committer
from octosync.server.config import ServerConfig
from octosync.server.dataspace_key import load_or_create_secret
from octosync.server.face_names import FaceName
from octosync.server.flusher import Flusher, writable
from octosync.server.guard import ConnectionGuard, default_max_connections
from octosync.server.plane import Plane
from octosync.server.ports import LiveConnection
from octosync.server.shared_blobs import ServerBlobs
from octosync.server.topgun_face import TopGunFace
from octosync.server.view_encoders import view_encoders
from octosync.signaling import SignalingHub
from octosync.store.commit_path import Commit
from octosync.store.dataspace_hook import dataspace_records
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import EncodedRecord
from octosync.store.storage_rules import rules_for
from octosync.syndicate import Relay
from octosync.topgun import TopGunCore
from octosync.topgun.core import SERVER_NODE

log = logging.getLogger(__name__)

T = TypeVar("T")
STALL_BOUNDS = (0.005, 0.010, 0.050, 0.100, 1.0)


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
        ticks: Sequence[Callable[[Runtime], None]] = (),
    ) -> None:
        """``node_id``: this node's id in a cluster, also its TopGun HLC's (servers of one
        cluster must never stamp alike); ``ticks``: the faces' periodic work (``Face.tick``),
        run once a second after the hub's expiry."""
        self.config = config
        self.ticks = tuple(ticks)
        self.writer = writer
        """The journal's writer; None: no journal. Faces write through ``commits``."""
        self.commits = Committer(
            writer,
            () if writer is None else rules_for(writer, config.data_dir, config.storage),
            self._fault,
            self._durable_acks,
        )
        """The one commit path every face's writes take (``server.commit``)."""
        self.run = f"{time.time_ns() // 1_000_000:x}"
        """Names this server run in journaled connection names (``<run>.<connection>``)."""
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
                producer_lease=config.producer_lease,
                verify_warp_hashes=config.verify_warp_hashes,
            ),
            clock=time.monotonic,
            encoders=view_encoders(),
            on_accept=on_accept,
            on_release=on_release,
            on_interest=on_interest,
            recorder=recorder,
        )
        self.flusher = Flusher(self.hub, high_water=config.socket_high_water, on_fault=self._fault)
        self.blobs = ServerBlobs(
            self.hub, capacity=config.shm_capacity, threshold=config.shm_threshold
        )
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
            index_inline=config.topgun_index_inline,
        )
        self.topgun.queries.per_connection = config.topgun_queries_per_connection
        self.topgun.queries.per_map = config.topgun_queries_per_map
        streams = CrdtStreams(_wall_ms, away_ms=int(config.plane_member_away * 1000))
        self.plane = Plane(self, streams, config.presence_ttl)
        """The multi-writer (CRDT plane) streams of the lazily face."""
        self.counters = Counters()
        self.durable_listeners: dict[int, Callable[[object, int], None]] = {}
        """Producers that asked to learn how far their stream is journaled (``OutboxAck``):
        called on the loop with ``(stream, epoch)`` once per commit that reached further."""
        self._durable_due: dict[int, tuple[object, int]] = {}
        self.links: dict[int, LiveConnection] = {}
        self.topgun_face = TopGunFace(
            self.topgun,
            self.hub,
            self.links,
            deliver=self.deliver,
            commits=self.commits,
            auth=config.auth,
            insecure_dev=config.insecure_dev,
            max_frame=self.limits.max_frame_bytes,
            data_dir=config.data_dir,
        )
        """The TopGun face: its flush timing, shared deflate and ways out."""
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
        self._face_states: dict[FaceName, object] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._lag: asyncio.Task[None] | None = None

    @property
    def relay(self) -> Relay:
        """The dataspace face's relay, made with the server's sturdy-ref secret on first use."""
        if self._relay is None:
            secret = self.config.dataspace_secret
            if secret is None:
                secret = load_or_create_secret(self.config.data_dir)
            self._relay = Relay(secret, record=self.writer is not None)
        return self._relay

    def check_activity_room(self) -> None:
        """Before a dataspace turn: refuse it while the journal could not record what it does
        (the storage rules: ``JournalUnavailable``, a full queue, ...)."""
        self.commits.refuse()

    def record_activity(self) -> None:
        """Queue what the dataspaces took since the last call to the journal (not waited for);
        a close's retractions cannot be refused, so a full queue loses those notes only."""
        relay = self._relay
        if relay is None or not self.commits.journaled:
            return
        taken = relay.take_activity()
        if taken:
            try:
                self.commits.submit(Commit(0, dataspace_records(taken, self.run)))
            except OctosyncError as exc:
                log.warning("dataspace activity not journaled: %s", exc)

    def started_relay(self) -> Relay | None:
        """The dataspace relay if the face has been used (the inspector lists it); never
        creates it (that would make the sturdy-ref key file)."""
        return self._relay

    @property
    def max_frame(self) -> int:
        return self.limits.max_frame_bytes

    @property
    def clustered(self) -> bool:
        return self.cluster is not None

    @property
    def journaled(self) -> bool:
        return self.writer is not None

    def authenticate(self, token: str | None) -> ClaimGrants:
        """The identity presenting ``token`` under the server's keys (``server.auth``)."""
        return authenticate(token, self.config.auth)

    def wake(self, conn: int) -> None:
        """The hub queued bytes for ``conn``: the flusher writes them this loop turn."""
        self.flusher.wake(conn)

    def face_state(self, face: FaceName, make: Callable[[Runtime], T]) -> T:
        """A face's own per-server state (its core, or the port its sessions get), made by
        ``make`` on first use and kept: a face that needs a core does not edit the runtime."""
        state = self._face_states.get(face)
        if state is None:
            state = self._face_states[face] = make(self)
        return cast(T, state)

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

    def follow_map(self, stream: str) -> None:
        """A lazily client asked for ``map:<name>``: the TopGun face starts producing it."""
        self.topgun_face.follow_map(stream)

    def after_commit(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None]
    ) -> None:
        """Journal ``records`` and call ``then`` on the loop once they, and everything queued
        before them, are committed (an empty list is a barrier); a failed commit resets
        ``conn``. The commit path's ``submit`` (``server.commit``), for the cluster's links."""
        self.commits.submit(Commit(conn, records, (then,)))

    def frame_durable(self, conn: int, stream: object, epoch: int) -> None:
        """A producer's frame is committed: its durability ack goes out after this drain."""
        due = self._durable_due.get(conn)
        if due is None or due[1] < epoch:
            self._durable_due[conn] = (stream, epoch)

    def _durable_acks(self) -> None:
        """After each drain of commits: one durability ack per producer, the furthest."""
        if self._durable_due:
            due, self._durable_due = self._durable_due, {}
            for conn, (stream, epoch) in due.items():
                listener = self.durable_listeners.get(conn)
                if listener is not None:
                    listener(stream, epoch)

    def send_now(self, conn: int, data: bytes) -> bool:
        """Write ``data`` to ``conn``'s socket now if nothing is queued before it."""
        return self.flusher.send_now(conn, data)

    def fault(self, conn: int, err: OctosyncError) -> None:
        """Reset one connection with ``err`` (serving it failed outside its own frames)."""
        self._fault(conn, err)

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
            for tick in self.ticks:
                tick(self)

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
        self.blobs.close()
        self.topgun_face.close()
