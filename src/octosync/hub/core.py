"""The hub: named streams with producer authority, its own mirror, encode-once fan-out.

Sans-I/O. Faces call ``connect``/``publish``/``subscribe``/``resync``/``write``/``disconnect``
with decoded frames; the hub raises a typed error (to the caller's connection only, see
``policy.py``) or appends the encoded bytes once to the stream's per-view ``FrameLog`` and wakes
the subscribers that were caught up. A face's writer then calls ``take_bytes(conn)`` and writes
the result in one write (``take`` gives the same frames one by one). Time is injected
(``clock``) and only read for the keep-last-state TTL.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from octosync.errors import (
    Forbidden,
    ForbiddenPublish,
    InternalError,
    OctosyncError,
    SnapshotRequired,
)
from octosync.hub.frame_log import FrameLog
from octosync.hub.limits import Limits
from octosync.hub.model import (
    Frame,
    GraphModel,
    ReplayModel,
    SnapshotFrame,
)
from octosync.hub.outbox import Outbox, OutboxLimits
from octosync.hub.streams import Face, check_face, dialect_face
from octosync.ipc.messages import Snapshot

StreamId = Hashable
ConnId = int
Action = Literal["read", "publish", "write"]


@dataclass(frozen=True, slots=True)
class ViewKey:
    """What a subscriber's bytes depend on: the wire dialect and the permission view."""

    dialect: str
    view: str = "all"


@dataclass(frozen=True, slots=True)
class OutFrame:
    """One frame as handed to an encoder: the stream, the (view-filtered) body, its kind."""

    stream: StreamId
    kind: Literal["snapshot", "diff", "write"]
    epoch: int
    body: object
    ts: int


Encoder = Callable[[OutFrame], bytes]
ViewFilter = Callable[[object], object | None]
"""Maps a frame body to what a view may see; ``None``: nothing visible, frame skipped."""


class Grants(Protocol):
    def allows(self, stream: StreamId, action: Action) -> bool: ...


class AllowAll:
    """Grants for ``--insecure-dev`` and tests: every action on every stream."""

    def allows(self, stream: StreamId, action: Action) -> bool:
        return True


AcceptHook = Callable[[StreamId, ConnId, Frame[object]], None]


@dataclass(frozen=True, slots=True)
class HubConfig:
    outbox: OutboxLimits = field(default_factory=OutboxLimits)
    limits: Limits = field(default_factory=Limits)
    retain_after_producer_leaves: float | None = 300.0
    """Seconds a stream's last state outlives its producer; 0 drops it at once, None keeps it."""
    max_replay_diffs: int = 1024
    coalesce_backlog: bool = False
    """Replace a subscriber's backlog of deltas by one snapshot when that is smaller.

    Off by default: subscribers then see every delta (only a reset skips some); on, a slow
    subscriber converges with fewer bytes but does not observe every intermediate state."""


@dataclass(eq=False, slots=True)
class _Connection:
    id: ConnId
    view: ViewKey
    grants: Grants
    wake: Callable[[ConnId], None]
    outbox: Outbox
    face: Face
    subscriptions: set[StreamId] = field(default_factory=set)
    pending_snapshot: set[StreamId] = field(default_factory=set)
    produces: set[StreamId] = field(default_factory=set)
    logs: dict[StreamId, FrameLog[ConnId]] = field(default_factory=dict)
    """The log of each subscribed stream in this connection's view (a lookup without hashing
    the view on every drain)."""
    fault: OctosyncError | None = None
    """Set when serving this connection failed; its next drain raises it (and nobody else's)."""


@dataclass(eq=False, slots=True)
class _Stream:
    id: StreamId
    model: GraphModel | ReplayModel | None = None
    producer: ConnId | None = None
    producer_has_snapshot: bool = False
    subscribers: dict[ConnId, _Connection] = field(default_factory=dict)
    by_view: dict[ViewKey, dict[ConnId, _Connection]] = field(default_factory=dict)
    """Subscribers grouped by view, so fan-out encodes once per view."""
    logs: dict[ViewKey, FrameLog[ConnId]] = field(default_factory=dict)
    """One shared log of encoded frames per view; subscribers hold cursors into it."""
    expires_at: float | None = None
    replay_cache: dict[ViewKey, list[bytes]] = field(default_factory=dict)

    def has_state(self) -> bool:
        return self.model is not None and self.model.epoch is not None


@dataclass(slots=True)
class HubStats:
    frames_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    encodes: int = 0
    drops: int = 0
    resets: int = 0
    rejected: int = 0
    coalesced: int = 0
    """Queued deltas replaced by one snapshot of the state they lead to."""


class Hub:
    def __init__(
        self,
        config: HubConfig | None = None,
        *,
        clock: Callable[[], float],
        encoders: dict[str, Encoder] | None = None,
        views: dict[str, ViewFilter] | None = None,
        on_accept: AcceptHook | None = None,
    ) -> None:
        self.config = config or HubConfig()
        self._clock = clock
        self._encoders: dict[str, Encoder] = dict(encoders or {})
        self._views: dict[str, ViewFilter] = dict(views or {})
        self._on_accept = on_accept
        self._conns: dict[ConnId, _Connection] = {}
        self._streams: dict[StreamId, _Stream] = {}
        self._ts = itertools.count(1)
        self.stats = HubStats()

    # --- registration ---------------------------------------------------------------------

    def register_encoder(self, dialect: str, encoder: Encoder) -> None:
        self._encoders[dialect] = encoder

    def register_view(self, name: str, view: ViewFilter) -> None:
        self._views[name] = view

    def next_ts(self) -> int:
        """Hub-wide monotonic counter (WVP's ``ts``)."""
        return next(self._ts)

    # --- connections ----------------------------------------------------------------------

    def connect(
        self,
        conn: ConnId,
        view: ViewKey,
        *,
        grants: Grants | None = None,
        wake: Callable[[ConnId], None] | None = None,
    ) -> None:
        if conn in self._conns:
            raise ValueError(f"connection {conn} is already registered")
        if view.dialect not in self._encoders:
            raise ValueError(f"no encoder registered for dialect {view.dialect!r}")
        if view.view != "all" and view.view not in self._views:
            raise ValueError(f"no view registered as {view.view!r}")
        self._conns[conn] = _Connection(
            conn,
            view,
            grants or AllowAll(),
            wake or (lambda _c: None),
            Outbox(self.config.outbox),
            dialect_face(view.dialect),
        )

    def change_view(self, conn: ConnId, view: ViewKey) -> None:
        """Switch a connection's dialect/view (a peer whose dialect shows only in use)."""
        c = self._conn(conn)
        if view.dialect not in self._encoders:
            raise ValueError(f"no encoder registered for dialect {view.dialect!r}")
        for sid in c.subscriptions:
            self._drop_subscriber(self._streams[sid], c)
        c.view = view
        for sid in c.subscriptions:
            # The new view's log has its own positions: restart from a snapshot in it.
            self._add_subscriber(self._streams[sid], c)
            c.pending_snapshot.add(sid)
        if c.subscriptions:
            c.wake(c.id)

    def disconnect(self, conn: ConnId) -> None:
        """Forget a connection; streams it produced are released (state kept per config)."""
        c = self._conns.pop(conn, None)
        if c is None:
            return
        for sid in c.subscriptions:
            stream = self._streams.get(sid)
            if stream is not None:
                self._drop_subscriber(stream, c)
                self._maybe_forget(stream)
        for sid in c.produces:
            stream = self._streams.get(sid)
            if stream is None or stream.producer != conn:
                continue
            stream.producer = None
            stream.producer_has_snapshot = False
            ttl = self.config.retain_after_producer_leaves
            if ttl is not None and ttl <= 0:
                self._drop_state(stream)
            elif ttl is not None:
                stream.expires_at = self._clock() + ttl
            self._maybe_forget(stream)

    def expire(self) -> list[StreamId]:
        """Drop retained states whose TTL passed; returns their stream ids."""
        now = self._clock()
        gone = []
        for stream in list(self._streams.values()):
            expires = stream.expires_at
            if stream.producer is None and expires is not None and now >= expires:
                self._drop_state(stream)
                gone.append(stream.id)
                self._maybe_forget(stream)
        return gone

    # --- producer side --------------------------------------------------------------------

    def producer_of(self, stream: StreamId) -> ConnId | None:
        s = self._streams.get(stream)
        return None if s is None else s.producer

    def publish(self, conn: ConnId, stream_id: StreamId, frame: Frame[object]) -> None:
        """Accept a frame from ``conn`` and fan it out, or raise and change nothing."""
        c = self._conn(conn)
        try:
            self._check_stream(c.face, stream_id)
            self._check_grant(c.grants, stream_id, "publish")
            limits = self.config.limits
            if isinstance(frame, SnapshotFrame):
                limits.check_epoch(frame.epoch)
            else:
                limits.check_epoch(frame.to_epoch, "to_epoch")
        except OctosyncError:
            self.stats.rejected += 1
            raise
        stream = self._streams.get(stream_id)
        if stream is not None and stream.producer not in (None, conn):
            self.stats.rejected += 1
            raise ForbiddenPublish(
                f"stream {stream_id!r} is produced by another connection", path="stream"
            )
        try:
            if isinstance(frame, SnapshotFrame):
                stream = stream or _Stream(stream_id)
                model = stream.model
                if isinstance(frame.body, Snapshot):
                    if not isinstance(model, GraphModel):
                        model = GraphModel()
                elif not isinstance(model, ReplayModel):
                    model = ReplayModel(self.config.max_replay_diffs)
                model.reset(frame)  # type: ignore[arg-type]
                stream.model = model
            else:
                if stream is None or not stream.producer_has_snapshot or stream.model is None:
                    raise SnapshotRequired(
                        f"a diff on stream {stream_id!r} before this producer's first snapshot"
                    )
                stream.model.apply(frame)  # type: ignore[arg-type]
        except Exception:
            self.stats.rejected += 1
            raise
        self._streams[stream_id] = stream
        stream.producer = conn
        stream.producer_has_snapshot = True
        stream.expires_at = None
        c.produces.add(stream_id)
        stream.replay_cache.clear()
        self.stats.frames_in += 1
        if self._on_accept is not None:
            self._on_accept(stream_id, conn, frame)
        self._fan_out(stream, frame)

    def needs_snapshot(self, stream: StreamId) -> bool:
        """True when the hub can no longer replay the stream and wants a fresh snapshot."""
        s = self._streams.get(stream)
        return s is not None and isinstance(s.model, ReplayModel) and s.model.wants_snapshot

    # --- subscriber side ------------------------------------------------------------------

    def subscribe(self, conn: ConnId, stream_id: StreamId) -> None:
        """Subscribe; the latest state (if any) is queued as the first frames."""
        c = self._conn(conn)
        self._check_stream(c.face, stream_id)
        self._check_grant(c.grants, stream_id, "read")
        stream = self._streams.get(stream_id)
        if stream is None:
            stream = self._streams[stream_id] = _Stream(stream_id)
        if conn not in stream.subscribers:
            self._add_subscriber(stream, c)
        c.subscriptions.add(stream_id)
        self._request_snapshot(c, stream_id)

    def unsubscribe(self, conn: ConnId, stream_id: StreamId) -> None:
        c = self._conn(conn)
        c.subscriptions.discard(stream_id)
        c.pending_snapshot.discard(stream_id)
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._drop_subscriber(stream, c)
            self._maybe_forget(stream)

    def resync(self, conn: ConnId, stream_id: StreamId) -> None:
        """A subscriber lost sync: it gets a fresh snapshot from the hub's mirror."""
        c = self._conn(conn)
        if stream_id not in c.subscriptions:
            raise Forbidden(f"resync on stream {stream_id!r} without a subscription")
        self._request_snapshot(c, stream_id)

    def write(self, conn: ConnId, stream_id: StreamId, body: object) -> ConnId:
        """Forward a subscriber's write to the stream's producer; returns the producer id.

        The face checks the write's shape (cell_set only) first; the hub decides who may write
        and encodes it in the producer's own dialect.
        """
        c = self._conn(conn)
        self._check_stream(c.face, stream_id)
        self._check_grant(c.grants, stream_id, "write")
        stream = self._streams.get(stream_id)
        if stream is None or stream.producer is None:
            raise Forbidden(f"stream {stream_id!r} has no producer to take writes")
        producer = self._conns[stream.producer]
        epoch = 0 if stream.model is None or stream.model.epoch is None else stream.model.epoch
        out = OutFrame(stream_id, "write", epoch, body, self.next_ts())
        try:
            data = self._encoders[producer.view.dialect](out)
        except Exception as exc:
            raise InternalError(
                f"the write could not be encoded for the producer: {exc!r}"
            ) from exc
        producer.outbox.push_control(data)
        producer.wake(producer.id)
        return producer.id

    def send_control(self, conn: ConnId, data: bytes) -> None:
        """Queue a control frame (an error, an ack) for one connection."""
        c = self._conns.get(conn)
        if c is not None:
            c.outbox.push_control(data)
            c.wake(conn)

    def view_of(self, conn: ConnId) -> ViewKey:
        return self._conn(conn).view

    # --- draining -------------------------------------------------------------------------

    def take(self, conn: ConnId) -> list[bytes]:
        """Everything queued for ``conn``, pending snapshots included, frame by frame."""
        c = self._conns.get(conn)
        if c is None:
            return []
        batch, frames = self._drain(c, joined=False)
        self.stats.frames_out += frames
        self.stats.bytes_out += sum(map(len, batch))
        return batch

    def take_bytes(self, conn: ConnId) -> tuple[bytes, int]:
        """Everything queued for ``conn`` as one write: ``(bytes, frame count)``.

        A caught-up subscriber's backlog is the same bytes object as every other subscriber's
        at the same position in the stream's log, so the usual case copies nothing.
        """
        c = self._conns.get(conn)
        if c is None:
            return b"", 0
        parts, frames = self._drain(c, joined=True)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.stats.frames_out += frames
        self.stats.bytes_out += len(data)
        return data, frames

    def _drain(self, c: _Connection, *, joined: bool) -> tuple[list[bytes], int]:
        """Control frames first, then per stream: a pending snapshot, or the log backlog.

        Raises the connection's fault (an ``OctosyncError``) instead when serving it failed,
        so the caller can reset that one connection with a typed error.
        """
        if c.fault is not None:
            raise c.fault
        try:
            return self._drain_parts(c, joined=joined)
        except Exception as exc:
            self._fault(c, exc)
            assert c.fault is not None
            raise c.fault from exc

    def _drain_parts(self, c: _Connection, *, joined: bool) -> tuple[list[bytes], int]:
        parts = c.outbox.take() if c.outbox else []
        frames = len(parts)
        subs = c.subscriptions
        pending = c.pending_snapshot
        for sid in subs if len(subs) < 2 else sorted(subs, key=repr):
            log = c.logs.get(sid)
            if pending and sid in pending:
                stream = self._streams.get(sid)
                replay = [] if stream is None else self._replay_bytes(stream, c.view)
                if replay:
                    # The replay is built from the mirror as of now: it covers the whole log.
                    parts.extend(replay)
                    frames += len(replay)
                    pending.discard(sid)
                    if log is not None:
                        log.add(c.id)
                # else: nothing to replay yet; the next snapshot published wakes it.
                continue
            if log is None:
                continue
            if self.config.coalesce_backlog and len(subs) == 1 and log.backlog(c.id) > 1:
                data = self._coalesce(self._streams[sid], c, log.take(c.id))
                parts.extend(data)
                frames += len(data)
            elif joined:
                blob, n = log.take_joined(c.id)
                if n:
                    parts.append(blob)
                    frames += n
            else:
                data = log.take(c.id)
                parts.extend(data)
                frames += len(data)
        return parts, frames

    def _coalesce(self, stream: _Stream, c: _Connection, data: list[bytes]) -> list[bytes]:
        """A backlog of deltas collapses to one snapshot when that is smaller.

        The subscriber fell behind (several deltas queued since its last write); the hub's
        mirror already holds the state they lead to, and its snapshot bytes are cached and
        shared per view, so this costs a size comparison. The receiver ends in the same state
        at the same epoch (lazily-spec reliable-sync ``state_suffix_collapses_to_snapshot``).
        """
        if not isinstance(stream.model, GraphModel):
            return data
        replay = self._replay_bytes(stream, c.view)
        if len(replay) == 1 and len(replay[0]) < sum(map(len, data)):
            self.stats.coalesced += len(data)
            return replay
        return data

    def subscribers_of(self, stream: StreamId) -> list[ConnId]:
        s = self._streams.get(stream)
        return [] if s is None else list(s.subscribers)

    def connections_with_dialect(self, dialect: str) -> list[ConnId]:
        return [c.id for c in self._conns.values() if c.view.dialect == dialect]

    def outbox_depth(self) -> int:
        """Frames waiting for connections: control frames plus every subscriber's backlog."""
        control = sum(c.outbox.depth_frames for c in self._conns.values())
        return control + sum(
            log.total_backlog() for s in self._streams.values() for log in s.logs.values()
        )

    def stream_ids(self) -> list[StreamId]:
        return list(self._streams)

    def connection_count(self) -> int:
        return len(self._conns)

    def epoch_of(self, stream: StreamId) -> int | None:
        s = self._streams.get(stream)
        return None if s is None or s.model is None else s.model.epoch

    def latest_snapshot(self, stream: StreamId) -> Snapshot | None:
        s = self._streams.get(stream)
        if s is None or not isinstance(s.model, GraphModel):
            return None
        return s.model.snapshot()

    # --- internals ------------------------------------------------------------------------

    def _conn(self, conn: ConnId) -> _Connection:
        try:
            return self._conns[conn]
        except KeyError:
            raise ValueError(f"unknown connection {conn}") from None

    def _check_stream(self, face: Face, stream_id: StreamId) -> None:
        """The stream belongs to the connection's face and its name is within the limits."""
        check_face(face, stream_id)
        if isinstance(stream_id, str):
            self.config.limits.check_stream_name(stream_id)

    def check_stream(self, view: ViewKey, stream_id: StreamId) -> None:
        """What ``subscribe``/``publish`` will say of this stream for a connection of ``view``,
        asked before connecting (a handshake that names a stream fails closed on it)."""
        self._check_stream(dialect_face(view.dialect), stream_id)

    def check_join(self, grants: Grants, stream_id: StreamId, *, publish: bool) -> None:
        """What ``subscribe`` (or, with ``publish``, ``publish``) will refuse a new connection
        holding ``grants``, asked before its handshake is answered, so that the refusal arrives
        in place of the reply instead of after it (a client learns at once, not never)."""
        self._check_grant(grants, stream_id, "publish" if publish else "read")
        stream = self._streams.get(stream_id)
        if publish and stream is not None and stream.producer is not None:
            raise ForbiddenPublish(
                f"stream {stream_id!r} is produced by another connection", path="stream"
            )

    @staticmethod
    def _check_grant(grants: Grants, stream_id: StreamId, action: Action) -> None:
        if not grants.allows(stream_id, action):
            raise Forbidden(f"not granted {action} on stream {stream_id!r}")

    def _fault(self, c: _Connection, exc: BaseException) -> None:
        """Serving ``c`` failed: it leaves every stream's log and is woken to be reset."""
        if c.fault is None:
            c.fault = (
                exc
                if isinstance(exc, OctosyncError)
                else InternalError(f"serving this connection failed: {exc!r}")
            )
        for sid in list(c.subscriptions):
            stream = self._streams.get(sid)
            if stream is not None:
                self._drop_subscriber(stream, c)
        c.pending_snapshot.clear()
        c.wake(c.id)

    def _request_snapshot(self, c: _Connection, stream_id: StreamId) -> None:
        """The snapshot replaces whatever backlog the connection had on this stream."""
        c.pending_snapshot.add(stream_id)
        log = c.logs.get(stream_id)
        if log is not None:
            log.remove(c.id)
        c.wake(c.id)

    def _encode(
        self, view: ViewKey, stream: StreamId, frame: Frame[object], ts: int
    ) -> bytes | None:
        body: object | None = frame.body
        if view.view != "all":
            body = self._views[view.view](frame.body)
            if body is None:
                return None
        kind: Literal["snapshot", "diff"] = (
            "snapshot" if isinstance(frame, SnapshotFrame) else "diff"
        )
        epoch = frame.epoch if isinstance(frame, SnapshotFrame) else frame.to_epoch
        self.stats.encodes += 1
        return self._encoders[view.dialect](OutFrame(stream, kind, epoch, body, ts))

    def _fan_out(self, stream: _Stream, frame: Frame[object]) -> None:
        """Append the frame once per view to that view's shared log: O(views), not O(subs).

        Only the subscribers that were caught up are woken (once until they drain again), and
        only the ones the log's bounds leave behind are reset; everyone else is not touched.
        """
        if not stream.subscribers:
            return
        ts = self.next_ts()
        sid = stream.id
        is_snapshot = isinstance(frame, SnapshotFrame)
        stats = self.stats
        for view, group in list(stream.by_view.items()):
            try:
                data = self._encode(view, sid, frame, ts)
            except Exception as exc:
                # This view's encoder failed: its subscribers are reset; other views go on.
                for c in list(group.values()):
                    self._fault(c, exc)
                continue
            if data is None:
                continue  # nothing of this frame is visible in this view
            log = stream.logs[view]
            if is_snapshot:
                # Subscribers waiting for a snapshot start their cursor at this one.
                for c in group.values():
                    if sid in c.pending_snapshot:
                        c.pending_snapshot.discard(sid)
                        log.add(c.id)
            caught_up, lost = log.append(data)
            for conn in caught_up:
                c = group[conn]
                c.wake(conn)
            for conn, missed in lost:
                c = group[conn]
                stats.drops += missed
                stats.resets += 1
                # Its backlog no longer fits: it restarts from a snapshot taken when it can
                # next write, and nobody else waits for it.
                c.pending_snapshot.add(sid)
                c.wake(conn)

    def _replay_bytes(self, stream: _Stream, view: ViewKey) -> list[bytes]:
        cached = stream.replay_cache.get(view)
        if cached is not None:
            return cached
        if stream.model is None:
            return []
        ts = self.next_ts()
        out = []
        for frame in stream.model.replay():
            data = self._encode(view, stream.id, frame, ts)
            if data is not None:
                out.append(data)
        stream.replay_cache[view] = out
        return out

    def _drop_state(self, stream: _Stream) -> None:
        stream.model = None
        stream.expires_at = None
        stream.replay_cache.clear()

    def _add_subscriber(self, stream: _Stream, c: _Connection) -> None:
        stream.subscribers[c.id] = c
        stream.by_view.setdefault(c.view, {})[c.id] = c
        log = stream.logs.get(c.view)
        if log is None:
            log = stream.logs[c.view] = FrameLog(self.config.outbox)
        c.logs[stream.id] = log

    @staticmethod
    def _drop_subscriber(stream: _Stream, c: _Connection) -> None:
        stream.subscribers.pop(c.id, None)
        group = stream.by_view.get(c.view)
        if group is not None:
            group.pop(c.id, None)
            if not group:
                del stream.by_view[c.view]
        c.logs.pop(stream.id, None)
        log = stream.logs.get(c.view)
        if log is not None:
            log.remove(c.id)
            if group is None or not group:
                del stream.logs[c.view]

    def _maybe_forget(self, stream: _Stream) -> None:
        if stream.producer is None and not stream.subscribers and not stream.has_state():
            self._streams.pop(stream.id, None)
