"""Streams and authority: the one place that decides whether a frame is accepted.

A frame is accepted when, in this order: the stream belongs to the connection's face and its
name and epochs are within the limits; the connection is granted ``publish`` (on a chain
stream, as the chain's publisher: ``streams.check_chain_publisher``); nobody else
produces the stream; the stream's model accepts it (a snapshot first, then gapless diffs the
state plane's own ``Mirror`` applies); and the recorder (the journal) can store it. Anything
refused changes nothing. Producers that leave keep their stream's last state for a TTL
measured on the injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from octosync.errors import (
    ForbiddenPublish,
    JournalUnavailable,
    LimitExceeded,
    OctosyncError,
    RemoteProtocolError,
    SnapshotRequired,
    StorageError,
)
from octosync.hub.connections import Connection, require
from octosync.hub.model import Body, Frame, GraphModel, ReplayModel, SnapshotFrame, check_contiguous
from octosync.hub.streams import (
    SERVER_PRODUCER,
    Face,
    check_chain_publisher,
    check_face,
    check_peer_may_produce,
    stream_face,
)
from octosync.hub.types import (
    ConnId,
    Grants,
    HubConfig,
    HubStats,
    RecordCommit,
    Recorder,
    RemoteOwner,
    StreamId,
)
from octosync.hub.warp_check import WarpCheck
from octosync.ipc.messages import Snapshot
from octosync.warp.frames import WarpDiff, WarpSnapshot


@dataclass(eq=False, slots=True)
class StreamState:
    id: StreamId
    model: GraphModel | ReplayModel[Body] | None = None
    producer: ConnId | None = None
    producer_has_snapshot: bool = False
    expires_at: float | None = None
    frames: int = 0
    """Frames accepted on this stream (inspection: the inspector's frames/s)."""
    last_frame_at: float = 0.0
    """When the producer last published (its ownership lease runs from here)."""
    resync_forwarded_at: float | None = None
    """When a subscriber's resync request last went to the producer (None: since answered)."""
    warp: WarpCheck | None = None
    """The hub's own render graph of a WVP stream (``verify_warp_hashes``); None: not followed
    (verification off, or since a restart, until the producer's next snapshot)."""

    def has_state(self) -> bool:
        return self.model is not None and self.model.epoch is not None

    @property
    def epoch(self) -> int | None:
        return None if self.model is None else self.model.epoch


class Authority:
    def __init__(
        self,
        config: HubConfig,
        stats: HubStats,
        clock: Callable[[], float],
        recorder: Recorder | None,
    ) -> None:
        self.config = config
        self.stats = stats
        self._clock = clock
        self._recorder = recorder
        self.streams: dict[StreamId, StreamState] = {}
        self.remote_owner: RemoteOwner | None = None
        """Who produces a stream on another node (a cluster), asked before a connection here
        becomes a stream's producer."""

    def check_stream(self, face: Face, stream_id: StreamId) -> None:
        """The stream belongs to ``face`` and its name is within the limits."""
        check_face(face, stream_id)
        if isinstance(stream_id, str):
            self.config.limits.check_stream_name(stream_id)

    def check_publisher(self, grants: Grants, stream_id: StreamId) -> None:
        """``grants`` allow publishing ``stream_id`` (a chain stream: only its publisher)."""
        require(grants, stream_id, "publish")
        check_chain_publisher(grants, stream_id)

    def check_producer(self, stream_id: StreamId, conn: ConnId | None) -> None:
        """``ForbiddenPublish`` if the stream has a producer other than ``conn`` (None: a
        connection that has not joined yet); peers never produce the server's streams."""
        if conn != SERVER_PRODUCER:
            check_peer_may_produce(stream_id)
        stream = self.streams.get(stream_id)
        if stream is not None and stream.producer not in (None, conn) and not self._lapsed(stream):
            raise ForbiddenPublish(
                f"stream {stream_id!r} is produced by another connection", path="stream"
            )
        if self.remote_owner is not None and (stream is None or stream.producer is None):
            node = self.remote_owner(stream_id, conn)
            if node is not None:
                raise ForbiddenPublish(
                    f"stream {stream_id!r} is produced on node {node!r}", path="stream"
                )

    def _lapsed(self, stream: StreamState) -> bool:
        """The producer's lease ran out (it published nothing for ``producer_lease``)."""
        lease = self.config.producer_lease
        return lease is not None and self._clock() - stream.last_frame_at >= lease

    def hand_over(self, c: Connection, stream_id: StreamId, to: Connection) -> None:
        """``c``, the producer, gives ``stream_id`` to ``to``; ``to`` continues it with a
        snapshot (its first diff is ``SnapshotRequired``, as for any new producer)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.producer != c.id:
            raise ForbiddenPublish(f"only the producer hands over stream {stream_id!r}")
        self.check_stream(to.face, stream_id)
        self.check_publisher(to.grants, stream_id)
        stream.producer = to.id
        stream.producer_has_snapshot = False
        stream.last_frame_at = self._clock()
        c.produces.discard(stream_id)
        to.produces.add(stream_id)

    def forward_resync(self, stream_id: StreamId) -> ConnId | None:
        """The producer a subscriber's resync request goes to now, or None: none here, or
        one was asked less than ``resync_interval`` ago and has not answered yet."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.producer is None or stream.producer == SERVER_PRODUCER:
            return None
        now = self._clock()
        last = stream.resync_forwarded_at
        if last is not None and now - last < self.config.resync_interval:
            return None
        stream.resync_forwarded_at = now
        return stream.producer

    def accept(self, c: Connection, stream_id: StreamId, frame: Frame[Body]) -> StreamState:
        """Apply ``frame`` from ``c`` to its stream, or raise and change nothing."""
        try:
            self.check_stream(c.face, stream_id)
            self.check_publisher(c.grants, stream_id)
            limits = self.config.limits
            if isinstance(frame, SnapshotFrame):
                limits.check_epoch(frame.epoch)
            else:
                limits.check_epoch(frame.to_epoch, "to_epoch")
            self.check_producer(stream_id, c.id)
            stream = self.streams.get(stream_id)
            taking_over = stream is not None and stream.producer not in (None, c.id)
            if taking_over and not isinstance(frame, SnapshotFrame):
                raise SnapshotRequired(
                    f"stream {stream_id!r}: a producer taking over a lapsed lease starts with "
                    "a snapshot"
                )
            checked = self._verify_warp(stream_id, stream, frame)
            prepared = self._prepare(stream_id, c.id, frame)
            stream = self._apply(stream or StreamState(stream_id), frame)
        except Exception:
            self.stats.rejected += 1
            raise
        if checked is not None:
            stream.warp = checked
        self.streams[stream_id] = stream
        stream.producer = c.id
        stream.producer_has_snapshot = True
        stream.expires_at = None
        stream.last_frame_at = self._clock()
        if isinstance(frame, SnapshotFrame):
            stream.resync_forwarded_at = None
        c.produces.add(stream_id)
        stream.frames += 1
        self.stats.frames_in += 1
        if prepared is not None:
            prepared()
        return stream

    def accept_from_server(self, stream_id: StreamId, frame: Frame[Body]) -> StreamState:
        """Apply a frame of a stream the server produces itself (``map:``): the same checks
        but grants, no recorder (its state is rebuilt from elsewhere at start-up)."""
        try:
            self.check_stream("lazily", stream_id)
            limits = self.config.limits
            if isinstance(frame, SnapshotFrame):
                limits.check_epoch(frame.epoch)
            else:
                limits.check_epoch(frame.to_epoch, "to_epoch")
            self.check_producer(stream_id, SERVER_PRODUCER)
            stream = self._apply(self.streams.get(stream_id) or StreamState(stream_id), frame)
        except Exception:
            self.stats.rejected += 1
            raise
        self.streams[stream_id] = stream
        stream.producer = SERVER_PRODUCER
        stream.producer_has_snapshot = True
        stream.expires_at = None
        stream.frames += 1
        self.stats.frames_in += 1
        return stream

    def _verify_warp(
        self, stream_id: StreamId, stream: StreamState | None, frame: Frame[Body]
    ) -> WarpCheck | None:
        """With ``verify_warp_hashes``: the WVP stream's graph after ``frame``, its
        ``state_hash`` checked (``Desync``); None when the stream is not followed."""
        if not self.config.verify_warp_hashes or stream_face(stream_id) != "wvp":
            return None
        after = WarpCheck()
        body = frame.body
        if isinstance(frame, SnapshotFrame):
            graph = body.graph if isinstance(body, WarpSnapshot) else None
            after.graph = after.snapshot(graph, frame.state_hash)
            return after
        if stream is None or stream.warp is None or stream.model is None:
            return None  # _apply refuses it, or the stream is not followed yet
        check_contiguous(stream.model.epoch, frame)  # a gap is EpochGap, not Desync
        ops = body.ops if isinstance(body, WarpDiff) else None
        after.graph = stream.warp.diff(ops, frame.state_hash)
        return after

    def _apply(self, stream: StreamState, frame: Frame[Body]) -> StreamState:
        if isinstance(frame, SnapshotFrame):
            model = stream.model
            if isinstance(frame.body, Snapshot):
                if not isinstance(model, GraphModel):
                    model = GraphModel()
            elif not isinstance(model, ReplayModel):
                model = ReplayModel[Body](self.config.max_replay_diffs)
            model.reset(frame)
            stream.model = model
            return stream
        if not stream.producer_has_snapshot or stream.model is None:
            raise SnapshotRequired(
                f"a diff on stream {stream.id!r} before this producer's first snapshot"
            )
        stream.model.apply(frame)
        return stream

    def _prepare(
        self, stream_id: StreamId, conn: ConnId, frame: Frame[Body]
    ) -> RecordCommit | None:
        """The recorder's half of accepting a frame, done before any state changes."""
        if self._recorder is None:
            return None
        try:
            return self._recorder.prepare(stream_id, conn, frame)
        except (RemoteProtocolError, JournalUnavailable):
            raise
        except OctosyncError as exc:
            raise LimitExceeded(
                f"the frame cannot be journaled: {exc.message}", path=exc.path
            ) from exc

    def restore(self, stream_id: StreamId, frames: Sequence[Frame[Body]]) -> None:
        """Install state rebuilt from the journal: a snapshot, then the diffs since.

        No producer and no TTL: the state stays until a producer connects and publishes its
        own snapshot (a diff from it first is ``SnapshotRequired``, as for any new producer).
        """
        if not frames:
            return
        current = self.streams.get(stream_id)
        if current is not None and current.has_state():
            raise ValueError(f"stream {stream_id!r} already has a state")
        if not isinstance(frames[0], SnapshotFrame):
            raise SnapshotRequired(f"restoring stream {stream_id!r} needs a snapshot first")
        stream = self._apply(StreamState(stream_id), frames[0])
        stream.producer_has_snapshot = True  # lets the fold below apply the diffs
        for frame in frames[1:]:
            self._apply(stream, frame)
        stream.producer_has_snapshot = False
        self.streams[stream_id] = stream

    def release(self, conn: ConnId, produced: set[StreamId]) -> list[StreamId]:
        """A producer left: its streams keep their state for the TTL (or drop it at once).

        Returns the streams whose state was dropped."""
        dropped = []
        for sid in produced:
            stream = self.streams.get(sid)
            if stream is None or stream.producer != conn:
                continue
            stream.producer = None
            stream.producer_has_snapshot = False
            ttl = self.config.retain_after_producer_leaves
            if ttl is not None and ttl <= 0:
                stream.expires_at = self._clock()
                if self._drop_state(stream):
                    dropped.append(sid)
            elif ttl is not None:
                stream.expires_at = self._clock() + ttl
        return dropped

    def expire(self) -> list[StreamId]:
        """Drop retained states whose TTL passed; returns their stream ids."""
        now = self._clock()
        gone = []
        for stream in list(self.streams.values()):
            expires = stream.expires_at
            due = stream.producer is None and expires is not None and now >= expires
            if due and self._drop_state(stream):
                gone.append(stream.id)
        return gone

    def _drop_state(self, stream: StreamState) -> bool:
        """Drop the stream's state, once the recorder has room to say so; False: kept (its
        expiry stays due, so the next ``expire`` round tries again)."""
        prepared = None
        if self._recorder is not None and stream.model is not None:
            try:
                prepared = self._recorder.prepare_drop(stream.id)
            except StorageError:
                return False
        stream.model = None
        stream.expires_at = None
        if stream.producer is None:
            del self.streams[stream.id]
        if prepared is not None:
            prepared()
        return True

    def get(self, stream_id: StreamId) -> StreamState | None:
        return self.streams.get(stream_id)

    def producer_of(self, stream_id: StreamId) -> ConnId | None:
        s = self.streams.get(stream_id)
        return None if s is None else s.producer

    def key_of(self, stream_id: StreamId, node_id: int) -> str | None:
        """A node's key in a lazily stream's state (None: none, or not a graph stream)."""
        s = self.streams.get(stream_id)
        return (
            s.model.key_of(node_id) if s is not None and isinstance(s.model, GraphModel) else None
        )

    def replay(self, stream_id: StreamId) -> list[Frame[Body]]:
        """The frames that bring a new subscriber to the stream's current state."""
        s = self.streams.get(stream_id)
        return [] if s is None or s.model is None else s.model.replay()

    def needs_snapshot(self, stream_id: StreamId) -> bool:
        """True when the hub can no longer replay the stream and wants a fresh snapshot."""
        s = self.streams.get(stream_id)
        return s is not None and isinstance(s.model, ReplayModel) and s.model.wants_snapshot

    def latest_snapshot(self, stream_id: StreamId) -> Snapshot | None:
        s = self.streams.get(stream_id)
        if s is None or not isinstance(s.model, GraphModel):
            return None
        return s.model.snapshot()

    def collapsible(self, stream_id: StreamId) -> bool:
        """The stream's replay is one snapshot of its whole state (a backlog may collapse)."""
        s = self.streams.get(stream_id)
        return s is not None and isinstance(s.model, GraphModel)
