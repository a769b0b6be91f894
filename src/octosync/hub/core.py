"""The hub: named streams with producer authority, its own mirror, encode-once fan-out.

Sans-I/O. Faces call ``connect``/``publish``/``subscribe``/``resync``/``write``/``disconnect``
with decoded frames; the hub raises a typed error (to the caller's connection only, see
``policy.py``) or appends the encoded bytes once to the stream's per-view ``FrameLog`` and wakes
the subscribers that were caught up. A face's writer then calls ``take_bytes(conn)`` and writes
the result in one write (``take`` gives the same frames one by one). Time is injected
(``clock``) and only read for the keep-last-state TTL.

The work is split by responsibility: ``authority.py`` decides what is accepted (face, limits,
grants, producer, gaps, journal), ``fanout.py`` encodes and queues what was accepted,
``connections.py`` holds connections and their grants. This class wires them together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from msgspec.structs import replace

from octosync.errors import Forbidden, InternalError, Unavailable
from octosync.hub.authority import Authority
from octosync.hub.connections import Connection, Connections, require
from octosync.hub.fanout import Fanout
from octosync.hub.model import Body, Frame
from octosync.hub.node_views import NodeKind, node_label
from octosync.hub.streams import check_peer_may_write
from octosync.hub.types import (
    GLOBAL_SCOPE,
    AcceptHook,
    Action,
    AllowAll,
    ConnId,
    Encoder,
    Grants,
    HubConfig,
    HubStats,
    InterestHook,
    NodeGrants,
    OutFrame,
    Recorder,
    ReleaseHook,
    RemoteOwner,
    StreamId,
    ViewFactory,
    ViewKey,
)
from octosync.ipc.messages import CellSet, Delta, RemoteOp, RemoteOpResult, Snapshot

__all__ = [
    "AcceptHook",
    "Action",
    "AllowAll",
    "ConnId",
    "Grants",
    "Hub",
    "HubConfig",
    "HubStats",
    "InterestHook",
    "OutFrame",
    "Recorder",
    "ReleaseHook",
    "StreamId",
    "ViewKey",
]


class Hub:
    def __init__(
        self,
        config: HubConfig | None = None,
        *,
        clock: Callable[[], float],
        encoders: dict[str, Encoder] | None = None,
        views: dict[str, ViewFactory] | None = None,
        on_accept: AcceptHook | None = None,
        on_release: ReleaseHook | None = None,
        on_interest: InterestHook | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.config = config or HubConfig()
        self.stats = HubStats()
        self._on_accept = on_accept
        self._on_release = on_release
        self._on_interest = on_interest
        self._conns = Connections(self.config.outbox)
        self._authority = Authority(self.config, self.stats, clock, recorder)
        self._stale: Callable[[StreamId], str | None] | None = None
        self._answer_relay: Callable[[StreamId, RemoteOpResult], bool] | None = None
        self._fanout = Fanout(
            self.config,
            self.stats,
            self._authority.replay,
            self._authority.collapsible,
            dict(encoders or {}),
            dict(views or {}),
        )

    # --- registration ---------------------------------------------------------------------

    def register_encoder(self, name: str, encoder: Encoder) -> None:
        self._fanout.encoders[name] = encoder

    def register_remote_owners(self, lookup: RemoteOwner) -> None:
        """In a cluster: a stream produced on another node refuses producers here, as one
        produced by another connection does."""
        self._authority.remote_owner = lookup

    def register_freshness(self, stale: Callable[[StreamId], str | None]) -> None:
        """In a cluster: ``stale(stream)`` says why this node's copy may be out of date (it
        lost the cluster); subscribing is then ``Unavailable``, never old state."""
        self._stale = stale

    def register_answer_relay(self, relay: Callable[[StreamId, RemoteOpResult], bool]) -> None:
        """In a cluster: a producer's answer to a writer that is not a connection here (one
        relayed from another node) goes to ``relay``."""
        self._answer_relay = relay

    def register_view(self, name: str, view: ViewFactory, *, overwrite: bool = True) -> None:
        """Name a permission view (``ViewKey.view``); ``overwrite=False`` keeps one already
        registered under that name (views are named by what they show)."""
        if overwrite or name not in self._fanout.views:
            self._fanout.views[name] = view

    def next_ts(self) -> int:
        """Hub-wide monotonic counter (WVP's ``ts``)."""
        return self._fanout.next_ts()

    # --- connections ----------------------------------------------------------------------

    def connect(
        self,
        conn: ConnId,
        view: ViewKey,
        *,
        grants: Grants | None = None,
        wake: Callable[[ConnId], None] | None = None,
    ) -> None:
        self._fanout.check_view(view)
        self._conns.add(conn, view, grants, wake)

    def change_view(self, conn: ConnId, view: ViewKey) -> None:
        """Switch a connection's dialect/view (a peer whose dialect shows only in use)."""
        self._fanout.check_view(view)
        self._fanout.change_view(self._conns.get(conn), view)

    def disconnect(self, conn: ConnId) -> None:
        """Forget a connection; streams it produced are released (state kept per config)."""
        c = self._conns.pop(conn)
        if c is None:
            return
        watched = list(c.subscriptions)
        self._fanout.leave_all(c)
        self._lost_interest(watched)
        released = [s for s in c.produces if self._authority.producer_of(s) == conn]
        for sid in self._authority.release(conn, c.produces):
            self._fanout.invalidate(sid)
        if self._on_release is not None:
            for sid in released:
                self._on_release(sid, conn)

    def expire(self) -> list[StreamId]:
        """Drop retained states whose TTL passed; returns their stream ids."""
        gone = self._authority.expire()
        for sid in gone:
            self._fanout.invalidate(sid)
        return gone

    def check_stream(self, view: ViewKey, stream_id: StreamId) -> None:
        """What ``subscribe``/``publish`` will say of this stream for a connection of ``view``,
        asked before connecting (a handshake that names a stream fails closed on it)."""
        self._authority.check_stream(view.face, stream_id)

    def check_join(self, grants: Grants, stream_id: StreamId, *, publish: bool) -> None:
        """What ``subscribe`` (or, with ``publish``, ``publish``) will refuse a new connection
        holding ``grants``, asked before its handshake is answered, so that the refusal arrives
        in place of the reply instead of after it (a client learns at once, not never)."""
        if publish:
            self._authority.check_publisher(grants, stream_id)
            self._authority.check_producer(stream_id, None)
        else:
            require(grants, stream_id, "read")

    def view_of(self, conn: ConnId) -> ViewKey:
        return self._conns.get(conn).view

    # --- producer side --------------------------------------------------------------------

    def publish(self, conn: ConnId, stream_id: StreamId, frame: Frame[Body]) -> None:
        """Accept a frame from ``conn`` and fan it out, or raise and change nothing."""
        self._authority.accept(self._conns.get(conn), stream_id, frame)
        if self._on_accept is not None:
            self._on_accept(stream_id, conn, frame)
        self._fanout.publish(stream_id, frame)

    def publish_from_server(self, stream_id: StreamId, frame: Frame[Body]) -> None:
        """Accept a frame of a stream the server produces (``map:``) and fan it out; not
        journaled, not shown to ``on_accept`` (the hook sees what connections publish)."""
        self._authority.accept_from_server(stream_id, frame)
        self._fanout.publish(stream_id, frame)

    def restore(self, stream_id: StreamId, frames: Sequence[Frame[Body]]) -> None:
        """Install a stream's state rebuilt from the journal (at start-up, before connections):
        a snapshot, then the diffs since. Late joiners get it until a producer connects and
        publishes its own snapshot; nothing is journaled or fanned out."""
        self._authority.restore(stream_id, frames)
        self._fanout.invalidate(stream_id)

    def producer_of(self, stream: StreamId) -> ConnId | None:
        return self._authority.producer_of(stream)

    def needs_snapshot(self, stream: StreamId) -> bool:
        """True when the hub can no longer replay the stream and wants a fresh snapshot."""
        return self._authority.needs_snapshot(stream)

    # --- subscriber side ------------------------------------------------------------------

    def subscribe(self, conn: ConnId, stream_id: StreamId) -> None:
        """Subscribe; the latest state (if any) is queued as the first frames."""
        c = self._conns.get(conn)
        self._authority.check_stream(c.face, stream_id)
        c.require(stream_id, "read")
        self._check_fresh(stream_id)
        first = not self._fanout.has_subscribers(stream_id)
        self._fanout.subscribe(c, stream_id)
        if first and self._on_interest is not None:
            self._on_interest(stream_id, True)

    def _check_fresh(self, stream_id: StreamId) -> None:
        why = None if self._stale is None else self._stale(stream_id)
        if why is not None:
            raise Unavailable(why, path="stream")

    def unsubscribe(self, conn: ConnId, stream_id: StreamId) -> None:
        c = self._conns.get(conn)
        watched = stream_id in c.subscriptions
        self._fanout.unsubscribe(c, stream_id)
        if watched:
            self._lost_interest([stream_id])

    def _lost_interest(self, streams: list[StreamId]) -> None:
        if self._on_interest is None:
            return
        for sid in streams:
            if not self._fanout.has_subscribers(sid):
                self._on_interest(sid, False)

    def resync(self, conn: ConnId, stream_id: StreamId) -> None:
        """A subscriber lost sync: it gets a fresh snapshot from the hub's mirror."""
        c = self._conns.get(conn)
        if stream_id not in c.subscriptions:
            raise Forbidden(f"resync on stream {stream_id!r} without a subscription")
        self._check_fresh(stream_id)
        self._fanout.request_snapshot(c, stream_id)

    def request_resync(self, conn: ConnId, stream_id: StreamId, body: object) -> ConnId | None:
        """A subscriber lost the producer's stream (a gap, a state-hash mismatch) and asks for
        a fresh snapshot: ``body`` (the face's request, encoded in the producer's own view as
        a ``resync`` frame) goes to the producer, at most once per ``resync_interval`` until
        it snapshots, and the snapshot fans out to everyone. With no producer here (or one
        that takes no requests) the subscriber gets the hub's replay instead; another node's
        stand-in takes them for that node's producer. Returns the producer it went to."""
        c = self._conns.get(conn)
        if stream_id not in c.subscriptions:
            raise Forbidden(f"resync on stream {stream_id!r} without a subscription")
        taken, producer = self.pass_resync(stream_id, body)
        if not taken:
            self._check_fresh(stream_id)
            self._fanout.request_snapshot(c, stream_id)
        return producer

    def pass_resync(self, stream_id: StreamId, body: object) -> tuple[bool, ConnId | None]:
        """``body``, a resync request, to the stream's producer (at most once per
        ``resync_interval`` until it snapshots): ``(taken, the producer it went to)``. Not
        taken: no producer here, or one that takes no requests (the caller answers from the
        hub's replay); taken with no producer: one was asked already and has not answered.
        Also how another node's request reaches this node's producer."""
        producer = self._authority.forward_resync(stream_id)
        target = None if producer is None else self._conns.find(producer)
        if target is None:
            return self._authority.producer_of(stream_id) is not None, None
        out = OutFrame(stream_id, "resync", self.epoch_of(stream_id) or 0, body, self.next_ts())
        try:
            data = self._fanout.encode_for(target, out)
        except InternalError:
            return False, None  # a producer that takes no requests
        target.outbox.push_control(data)
        target.wake(target.id)
        return True, target.id

    def hand_over(self, conn: ConnId, stream_id: StreamId, to: ConnId) -> None:
        """The producer ``conn`` gives ``stream_id`` to connection ``to`` (same face, with
        the publish grant), which continues it with a snapshot."""
        target = self._conns.find(to)
        if target is None:
            raise Forbidden(f"no connection {to} to hand stream {stream_id!r} to", path="to")
        self._authority.hand_over(self._conns.get(conn), stream_id, target)

    def write(
        self, conn: ConnId, stream_id: StreamId, body: object, subject: str | None = None
    ) -> ConnId:
        """Forward a subscriber's write to the stream's producer; returns the producer id.

        The face checks the write's shape (cell_set only) first; the hub decides who may write
        (the stream, then each node) and encodes it in the producer's own dialect. A producer
        that takes ``RemoteOp``s gets one per cell, stamped with the writer (``subject``: its
        token's subject), and answers refusals only.
        """
        c = self._conns.get(conn)
        cells = (
            [op for op in body.ops if isinstance(op, CellSet)] if isinstance(body, Delta) else []
        )
        producer = self._writable(c, stream_id, "write", [op.slot_id for op in cells])
        if producer.remote_ops:
            for op in cells:
                if isinstance(op.payload, bytes):
                    stamped = RemoteOp("write", op.slot_id, op.payload, 0, conn, subject)
                    self._forward(producer, stream_id, "write", stamped)
        else:
            self._forward(producer, stream_id, "write", body)
        return producer.id

    def remote_op(
        self, conn: ConnId, stream_id: StreamId, op: RemoteOp, subject: str | None = None
    ) -> bool:
        """Forward a writer's ``RemoteOp`` once the stream and the node allow its kind,
        stamped with who asked. True: the producer answers it; False: it took the older
        ``cell_set`` form and will not (a ``trigger_effect`` is refused then)."""
        c = self._conns.get(conn)
        producer = self._writable(c, stream_id, op.kind, [op.node])
        return self._ask(producer, stream_id, replace(op, peer=conn, subject=subject))

    def relay_remote_op(self, stream_id: StreamId, op: RemoteOp) -> bool:
        """A writer's ``RemoteOp`` from another node, checked and stamped there (its ``peer``
        stands for that writer here): to this node's producer, as ``remote_op`` says."""
        return self._ask(self._producer(stream_id), stream_id, op)

    def _ask(self, producer: Connection, stream_id: StreamId, op: RemoteOp) -> bool:
        if producer.remote_ops:
            self._forward(producer, stream_id, "write", op)
            return True
        if op.kind != "write" or op.payload is None:
            raise Forbidden(
                f"the producer of stream {stream_id!r} takes no trigger_effect requests",
                path="kind",
            )
        epoch = self.epoch_of(stream_id) or 0
        delta = Delta(epoch, epoch + 1, (CellSet(op.node, op.payload),))
        self._forward(producer, stream_id, "write", delta)
        return False

    def answer(self, conn: ConnId, stream_id: StreamId, result: RemoteOpResult) -> bool:
        """The producer ``conn`` answers a writer's ``RemoteOp``: relayed to that writer alone
        (``result.peer``), if it still follows the stream. False: nobody to tell."""
        if self._authority.producer_of(stream_id) != conn:
            raise Forbidden(f"only the producer of stream {stream_id!r} answers its writers")
        target = None if result.peer is None else self._conns.find(result.peer)
        if target is None and self._answer_relay is not None:
            return self._answer_relay(stream_id, result)  # a writer on another node
        if target is None or stream_id not in target.subscriptions:
            return False
        self._forward(target, stream_id, "answer", replace(result, peer=None))
        return True

    def _writable(
        self, c: Connection, stream_id: StreamId, kind: NodeKind, nodes: Sequence[int]
    ) -> Connection:
        """The stream's producer, once ``c`` may ``kind`` every node of ``nodes`` there."""
        self._authority.check_stream(c.face, stream_id)
        check_peer_may_write(stream_id)
        c.require(stream_id, kind)
        grants = c.grants
        rules = grants.node_rules(stream_id) if isinstance(grants, NodeGrants) else None
        if rules is not None:
            for i, node in enumerate(nodes):
                key = self._authority.key_of(stream_id, node)
                if not rules.allows(kind, node, key):
                    raise Forbidden(
                        f"no {kind} grant on node {node_label(node, key)} of stream {stream_id!r}",
                        path=f"ops[{i}]" if len(nodes) > 1 else "node",
                    )
        return self._producer(stream_id)

    def _producer(self, stream_id: StreamId) -> Connection:
        stream = self._authority.get(stream_id)
        if stream is None or stream.producer is None:
            raise Forbidden(f"stream {stream_id!r} has no producer to take writes")
        return self._conns.get(stream.producer)

    def _forward(
        self,
        target: Connection,
        stream_id: StreamId,
        kind: Literal["write", "answer"],
        body: object,
    ) -> None:
        out = OutFrame(stream_id, kind, self.epoch_of(stream_id) or 0, body, self.next_ts())
        target.outbox.push_control(self._fanout.encode_for(target, out))
        target.wake(target.id)

    def take_remote_ops(self, conn: ConnId) -> None:
        """The producer ``conn`` takes ``RemoteOp`` requests and answers them."""
        self._conns.get(conn).remote_ops = True

    def notify(
        self, conn: ConnId, stream_id: StreamId | None, data: Mapping[str, bytes]
    ) -> list[ConnId]:
        """Relay a notice from ``conn`` to a stream's subscribers, or (``None``) to every
        connection whose encoder ``data`` has bytes for (``data``: the notice per encoder,
        one per transport of the face); it needs ``publish`` on the stream, or on
        ``GLOBAL_SCOPE``. Returns the connections it was queued for."""
        c = self._conns.get(conn)
        if stream_id is None:
            c.require(GLOBAL_SCOPE, "publish")
            targets = [x.id for x in self._conns if x.view.encoder in data]
        else:
            self._authority.check_stream(c.face, stream_id)
            c.require(stream_id, "publish")
            targets = self.subscribers_of(stream_id)
        sent = []
        for target in targets:
            t = self._conns.find(target)
            if target != conn and t is not None and t.view.encoder in data:
                self.send_control(target, data[t.view.encoder])
                sent.append(target)
        return sent

    def send_control(self, conn: ConnId, data: bytes) -> None:
        """Queue a control frame (an error, an ack) for one connection."""
        c = self._conns.find(conn)
        if c is not None:
            c.outbox.push_control(data)
            c.wake(conn)

    def send_lossless(self, conn: ConnId, data: bytes) -> bool:
        """Queue a frame that must not be dropped: False (nothing queued) when the
        connection's control queue is full, and the caller resets the connection."""
        c = self._conns.find(conn)
        if c is None:
            return True
        if c.outbox.control_full():
            return False
        c.outbox.push_control(data)
        c.wake(conn)
        return True

    def quiet(self, conn: ConnId) -> bool:
        """Nothing is queued for ``conn`` and it follows no stream: a frame written to its
        socket now goes out in order (``Flusher.send_now``)."""
        c = self._conns.find(conn)
        return c is not None and c.fault is None and not c.outbox and not c.subscriptions

    def count_out(self, frames: int, size: int) -> None:
        """Frames written to a socket without passing through an outbox."""
        self.stats.frames_out += frames
        self.stats.bytes_out += size

    # --- draining -------------------------------------------------------------------------

    def take(self, conn: ConnId) -> list[bytes]:
        """Everything queued for ``conn``, pending snapshots included, frame by frame."""
        c = self._conns.find(conn)
        if c is None:
            return []
        batch, frames = self._fanout.drain(c, joined=False)
        self.stats.frames_out += frames
        self.stats.bytes_out += sum(map(len, batch))
        return batch

    def take_bytes(self, conn: ConnId) -> tuple[bytes, int]:
        """Everything queued for ``conn`` as one write: ``(bytes, frame count)``.

        A caught-up subscriber's backlog is the same bytes object as every other subscriber's
        at the same position in the stream's log, so the usual case copies nothing.
        """
        c = self._conns.find(conn)
        if c is None:
            return b"", 0
        parts, frames = self._fanout.drain(c, joined=True)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.stats.frames_out += frames
        self.stats.bytes_out += len(data)
        return data, frames

    # --- inspection -----------------------------------------------------------------------

    def subscribers_of(self, stream: StreamId) -> list[ConnId]:
        return self._fanout.subscribers_of(stream)

    def connections_with_encoder(self, encoder: str) -> list[ConnId]:
        return [c.id for c in self._conns if c.view.encoder == encoder]

    def outbox_depth(self) -> int:
        """Frames waiting for connections: control frames plus every subscriber's backlog."""
        return sum(c.outbox.depth_frames for c in self._conns) + self._fanout.backlog()

    def backlog_of(self, stream: StreamId) -> int:
        """Frames of ``stream`` queued for its subscribers (snapshots pending not counted)."""
        return self._fanout.backlog_of(stream)

    def frames_accepted_of(self, stream: StreamId) -> int:
        """Frames accepted on ``stream`` since the hub first saw it."""
        s = self._authority.get(stream)
        return 0 if s is None else s.frames

    def stream_ids(self) -> list[StreamId]:
        return list(dict.fromkeys([*self._authority.streams, *self._fanout.audiences]))

    def connection_count(self) -> int:
        return len(self._conns)

    def epoch_of(self, stream: StreamId) -> int | None:
        s = self._authority.get(stream)
        return None if s is None else s.epoch

    def latest_snapshot(self, stream: StreamId) -> Snapshot | None:
        return self._authority.latest_snapshot(stream)

    def replay_of(self, stream: StreamId) -> list[Frame[Body]]:
        """The frames a new subscriber starts from: a WVP stream's last snapshot and the diffs
        since (none once its replay log overflowed), a lazily stream's current snapshot."""
        return self._authority.replay(stream)
