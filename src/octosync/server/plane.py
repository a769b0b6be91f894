"""The CRDT plane's I/O half: journal accepted ops, then send them, encoded once per dialect.

``hub.crdt_streams.CrdtStreams`` decides; this moves bytes. A writer's frame is checked, the
storage rules asked (the one commit path, ``store.commit_path``: nothing is merged while the
journal cannot take it), its ops journaled, and only once the commit succeeded merged, fanned
out to the stream's readers and echoed to the writer as its acknowledgement.
What commits accepted goes out as one frame per stream and reader, at most once per
``FLUSH_GAP`` (a commit settles many writers' frames at once; one frame each would multiply
the frames every reader's queue holds, and the socket writes, by the number of writers). A
failed commit resets the writer's connection (the commit path's answer), so the writer, told
nothing, resends on reconnect. Every frame goes out through ``Hub.send_lossless``: a reader
whose queue is full is reset rather than silently missing an op, and catches up from the whole
state it gets on reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from octosync.cluster.planes import PlaneStats
from octosync.crdt.collect import Watermark
from octosync.crdt.plane import PlaneReplica
from octosync.errors import (
    DocumentUnavailable,
    InvalidRecord,
    LimitExceeded,
    OctosyncError,
    Overloaded,
)
from octosync.hub import Hub
from octosync.hub.crdt_streams import Accepted, Audience, Checked, CrdtStreams
from octosync.hub.presence import DEFAULT_TTL, PresenceRooms, is_ephemeral
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp, CrdtSync
from octosync.server.gap_flush import GapFlush
from octosync.server.plane_parking import Parking
from octosync.store.commit_path import Ask, Commit, CommitPath
from octosync.store.records import PlaneOps, encode_record

log = logging.getLogger(__name__)


class PlaneReplicator(Protocol):
    """Where a cluster stores accepted ops besides the journal (``links.cluster_planes``):
    ``then`` once they are stored; a batch not stored in time resets ``conn``."""

    @property
    def stats(self) -> PlaneStats: ...

    @property
    def position(self) -> int:
        """The cluster's plane op stream's sequence this node has taken up to."""
        ...

    def replicate(
        self, conn: ConnId, stream: str, ops: Sequence[CrdtOp], then: Callable[[], None]
    ) -> None: ...


class PresenceCarrier(Protocol):
    """In a cluster, what carries presence and awareness between nodes
    (``links.cluster_presence``): a document is followed while this node's connections read it."""

    def follow(self, stream: str) -> None: ...

    def unfollow(self, stream: str) -> None: ...

    def publish(self, stream: str, ops: Sequence[CrdtOp]) -> None: ...


class PlaneHolder(Protocol):
    """In a cluster holding documents by interest (``links.cluster_held``): which documents
    this node has loaded; a member's join may start a load, its leaving an idle timer."""

    def joined(self, conn: ConnId, stream: str) -> bool:
        """``conn`` joined ``stream``: True when the document is loaded (serve it now)."""
        ...

    def left(self, conn: ConnId, stream: str) -> None: ...

    def ready(self, stream: str) -> bool: ...


class PlaneHost(Protocol):
    """What the plane uses of the server (``server.runtime.Runtime``): the hub, the commit
    path, and a way to reset a connection."""

    @property
    def hub(self) -> Hub: ...

    @property
    def commits(self) -> CommitPath: ...

    def fault(self, conn: int, err: OctosyncError) -> None: ...

    def send_now(self, conn: int, data: bytes) -> bool:
        """Write ``data`` to ``conn`` at once if nothing is queued before it (else False)."""
        ...


@dataclass(frozen=True, slots=True)
class Framing:
    """How one member's frames are encoded: its dialect's encoder plus transport framing."""

    key: str
    encode: Callable[[CrdtSync], bytes]


FLUSH_GAP = 0.005
"""Seconds between two fan-outs of a plane at most: an idle server sends at once, a busy one
puts many commits' ops into one frame per reader (each frame is a write to every reader's
socket: under many writers, frames per second, not ops, are what costs)."""


ASK = Ask(then="resend later")
"""How the plane words a refusal of the storage rules."""


PRESENCE_GAP = 0.05
"""Seconds between two fan-outs of presence and awareness at most: a cursor moved many times
within it goes out once, as its latest value."""


COLLECT_GAP = 1.0
"""Seconds between two tombstone collections of one document at most (each scans it)."""


JOIN_CHUNK = 1000
"""Ops per frame of the whole document a member gets when it joins; only the last frame
carries the frontier, so a member knows it has the document when a frame has one."""


@dataclass(slots=True)
class _Due:
    """What the commits of one loop turn send on one stream."""

    fanout: list[CrdtOp] = field(default_factory=list)
    acks: dict[ConnId, list[CrdtOp]] = field(default_factory=dict)


class Plane:
    """The runtime's plane streams: members' framing, journaling, fan-out."""

    def __init__(
        self, runtime: PlaneHost, core: CrdtStreams, presence_ttl: float = DEFAULT_TTL
    ) -> None:
        self.rt = runtime
        self.core = core
        self.presence = PresenceRooms(presence_ttl)
        """Presence and awareness: kept here, never journaled (``hub.presence``)."""
        self._presence_due: dict[str, dict[tuple[int, str], CrdtOp]] = {}
        self._presence_flusher = GapFlush(self._flush_presence, PRESENCE_GAP)
        self._ticking: asyncio.TimerHandle | None = None
        self._framing: dict[ConnId, Framing] = {}
        self._due: dict[str, _Due] = {}
        self._flusher = GapFlush(self._flush, FLUSH_GAP)
        self.replicator: PlaneReplicator | None = None
        """In a cluster, the op stream each accepted frame is published to before it is
        merged, fanned out and acknowledged."""
        self._positions_ok = True
        """False once a remote batch could not be queued for the journal: positions stop
        being journaled, so a restart replays the cluster's stream from before it."""
        self.holder: PlaneHolder | None = None
        """In a cluster holding documents by interest: members of a document being loaded,
        and their frames, wait in ``parking`` until ``loaded``."""
        self.parking = Parking()
        self._collecting: dict[str, asyncio.TimerHandle] = {}
        self.presence_carrier: PresenceCarrier | None = None
        """In a cluster, what carries presence and awareness to the other nodes' members."""
        self._presence_publish: dict[str, dict[tuple[int, str], CrdtOp]] = {}
        self.journal_remote = True
        """Journal other nodes' ops (False when JetStream is the documents' store of record:
        the journal keeps what this node accepted)."""

    def join(self, conn: ConnId, stream: str, framing: Framing, state: Sequence[CrdtOp]) -> None:
        """A member joined (``core.join`` done): it gets the whole state first, with the
        server's frontier (once the document is loaded, with a holder)."""
        if self.holder is not None and not self.holder.joined(conn, stream):
            self.parking.member(conn, stream, framing)
            return
        self._framing[conn] = framing
        if self.presence_carrier is not None:
            self.presence_carrier.follow(stream)
        frontier = self.core.streams[stream].replica.frontier()
        live = self.presence.live(stream)
        member = self.core.streams[stream].members.get(conn)
        if member is not None and member.rules is not None:
            live = tuple(member.readable(live))
        if live:
            self.send([conn], CrdtSync(ops=live))  # others' presence, before the document
        ops = tuple(state)
        for at in range(0, max(len(ops) - JOIN_CHUNK, 0), JOIN_CHUNK):
            self.send([conn], CrdtSync(ops=ops[at : at + JOIN_CHUNK]))
        last = ops[(max(len(ops) - 1, 0) // JOIN_CHUNK) * JOIN_CHUNK :]
        self.send([conn], CrdtSync(frontier=frontier, ops=last))

    def replicas(self) -> Mapping[str, PlaneReplica]:
        """Every document's replica, by stream (the cluster's anti-entropy reads them)."""
        return {name: stream.replica for name, stream in self.core.streams.items()}

    @property
    def replica_position(self) -> int:
        return self.core.replica_position

    def fault(self, conn: int, err: OctosyncError) -> None:
        self.rt.fault(conn, err)

    def leave(self, conn: ConnId) -> None:
        self._framing.pop(conn, None)
        held = self.core.stream_of(conn)
        self.parking.drop(conn)
        for stream, ops in self.presence.close(conn, _wall_ms()).items():
            self._presence_out(stream, ops)
        self.core.leave(conn)
        if self.presence_carrier is not None and held is not None:
            left = self.core.streams.get(held)
            if left is None or not left.members:
                self.presence_carrier.unfollow(held)
                self.presence.forget_remote(held)
        if self.holder is not None and held is not None:
            self.holder.left(conn, held)

    def loaded(self, stream: str) -> None:
        """The holder loaded ``stream``: its waiting members get it, then their frames go in."""
        for parked in self.parking.take(stream):
            conn = parked.conn
            if not self.core.is_member(conn) or not isinstance(parked.framing, Framing):
                continue
            self.join(conn, stream, parked.framing, self.core.state_for(conn))
            try:
                for sync in parked.frames:
                    self.receive(conn, sync)
            except OctosyncError as exc:
                self.rt.fault(conn, exc)

    def release(self, stream: str, failed: bool) -> None:
        """The holder let ``stream`` go: out of memory; members still waiting for a load that
        failed are told so (their clients reconnect and send again)."""
        for parked in self.parking.take(stream):
            self.rt.fault(
                parked.conn,
                DocumentUnavailable(f"document {stream!r} could not be loaded in time"),
            )
        self._due.pop(stream, None)
        self.core.drop(stream)

    def receive(self, conn: ConnId, sync: CrdtSync) -> None:
        """A member's frame: answer its frontier, then journal and accept its ops; presence
        and awareness ops are taken at once and never journaled. Everything that can refuse
        the frame runs before any of it is taken. A frame of a document being loaded waits."""
        if self.holder is not None:
            stream = self.core.stream_of(conn)
            if stream is not None and not self.holder.ready(stream):
                if conn not in self.parking:  # its load failed: it was told, and is reset
                    raise DocumentUnavailable(f"document {stream!r} is not loaded", path="ops")
                self.parking.frame(conn, stream, sync)
                return
        checked = self.core.check(conn, sync)
        ephemeral = [(i, op) for i, op in enumerate(checked.ops) if is_ephemeral(op)]
        if ephemeral:
            self.presence.check(conn, checked.stream, ephemeral)
            durable = tuple(op for op in checked.ops if not is_ephemeral(op))
            checked = Checked(checked.conn, checked.stream, durable)
        commits = self.rt.commits
        record = None
        if checked.ops and commits.journaled:
            commits.refuse(ASK)
            try:
                record = encode_record(PlaneOps(checked.stream, checked.ops))
            except InvalidRecord as exc:
                raise LimitExceeded(
                    f"the ops cannot be journaled: {exc.message}", path=exc.path
                ) from exc
        if ephemeral:
            now = asyncio.get_running_loop().time()
            changed = self.presence.put(conn, checked.stream, (op for _, op in ephemeral), now)
            self._presence_out(checked.stream, changed)
            if self.presence_carrier is not None:  # a heartbeat renews the value on every node
                held = self.presence.held(checked.stream, (op for _, op in ephemeral))
                self._presence_renew(checked.stream, held)
        delta = self.core.delta_for(conn, sync)
        if delta:
            self.send([conn], CrdtSync(ops=delta))
        if sync.frontier:
            self.core.report(conn, sync.frontier)
            self._collect_soon(checked.stream)
        if not checked.ops:
            return
        if record is None:
            self._stored(checked)
            return
        stored = checked
        commits.submit(Commit(conn, (record,), (lambda: self._stored(stored),)))

    def _stored(self, checked: Checked) -> None:
        """Journaled (when there is a journal); in a cluster, published next."""
        replicator = self.replicator
        if replicator is None:
            self._committed(checked)
        else:
            replicator.replicate(
                checked.conn, checked.stream, checked.ops, lambda: self._committed(checked)
            )

    def _committed(self, checked: Checked) -> None:
        self._accepted(self.core.commit(checked))

    def merge_remote(self, stream: str, ops: Sequence[CrdtOp], position: int | None) -> int:
        """Ops another node accepted (stored in the cluster's stream up to ``position``):
        merged and fanned out at once, journaled with the position behind them (nobody waits
        for that commit: the stream holds them). Returns how many changed the replica."""
        changed = self.core.merge_remote(stream, ops)
        if changed:
            due = self._due.get(stream)
            if due is None:
                due = self._due[stream] = _Due()
            due.fanout.extend(changed)
            self._flusher.soon()
        journaled = self.journal_remote and self.rt.commits.journaled
        if not journaled or not (changed or position is not None):
            return len(changed)
        at = position if self._positions_ok else None
        try:  # nobody waits for this commit: the cluster's stream holds the ops
            record = encode_record(PlaneOps(stream, tuple(changed), at))
            self.rt.commits.submit(Commit(0, (record,)))
        except OctosyncError as exc:
            if self._positions_ok:
                log.warning("cluster: remote plane ops not journaled (%s); positions stop", exc)
            self._positions_ok = False
        return len(changed)

    def _accepted(self, accepted: Accepted) -> None:
        """Gather what commits decided this loop turn; ``_flush`` sends it at the turn's end."""
        due = self._due.get(accepted.stream)
        if due is None:
            due = self._due[accepted.stream] = _Due()
        due.fanout.extend(accepted.fanout)
        due.acks.setdefault(accepted.writer, []).extend(accepted.ack)
        self._flusher.soon()

    def _flush(self) -> None:
        """One frame per stream and turn to every reader (its own ops included: they are its
        acknowledgement), and to each writer what that frame does not already acknowledge."""
        due, self._due = self._due, {}
        for name, batch in due.items():
            stream = self.core.streams.get(name)
            if stream is None:
                continue
            audience = stream.audience()
            if batch.fanout:
                self._fan_out(audience, batch.fanout)
            sent = set(batch.fanout)
            reading = audience.readers
            for writer, acks in batch.acks.items():
                member = stream.members.get(writer)
                got: set[CrdtOp] = set()  # what the fan-out already told the writer
                if writer in reading and member is not None:
                    got = sent if member.rules is None else set(member.readable(sent))
                rest = [op for op in acks if op not in got]
                if rest:
                    self.send([writer], CrdtSync(ops=tuple(rest)))

    # --- collecting tombstones ------------------------------------------------------------------

    def _collect_soon(self, stream: str) -> None:
        """Collect ``stream``'s stable tombstones within ``COLLECT_GAP`` (not in a cluster:
        there each node knows only its own members, so no node alone knows what is stable)."""
        if stream in self._collecting or self.replicator is not None or self.holder is not None:
            return
        loop = asyncio.get_running_loop()
        self._collecting[stream] = loop.call_later(COLLECT_GAP, self._collect, stream)

    def _collect(self, stream: str) -> None:
        """Journal and publish what the watermark lets go (``NAME/gc`` entries, compacted text
        chunks): like a writer's ops, merged and fanned out only once committed. The watermark
        is taken now, and the ops computed once everything queued before is merged: an op a
        member sent before its report may still be committing, and what it names must stay."""
        del self._collecting[stream]
        mark = self.core.watermark(stream)
        # a barrier: its effect runs once everything queued before it is merged (now, unjournaled)
        self.rt.commits.submit(Commit(0, (), (lambda: self._collect_under(stream, mark),)))

    def _collect_under(self, stream: str, mark: Watermark) -> None:
        ops = tuple(self.core.collect(stream, mark))
        if not ops:
            return
        checked = Checked(0, stream, ops)
        commits = self.rt.commits
        if not commits.journaled:
            self._committed(checked)
            return
        try:
            commits.refuse(ASK)
            record = encode_record(PlaneOps(stream, ops))
        except OctosyncError as exc:  # the next report tries again
            log.warning("tombstones of %r not collected: %s", stream, exc)
            return
        commits.submit(Commit(0, (record,), (lambda: self._committed(checked),)))

    # --- presence and awareness ---------------------------------------------------------------

    def merge_presence(self, node: ConnId, stream: str, ops: Sequence[CrdtOp]) -> None:
        """Another node's values of ``stream`` (``node``: the negative id standing for it)."""
        now = asyncio.get_running_loop().time()
        self._presence_out(stream, self.presence.put_remote(node, stream, ops, now), local=False)

    def local_presence(self, stream: str) -> tuple[CrdtOp, ...]:
        return self.presence.local(stream)

    def _presence_out(self, stream: str, ops: Iterable[CrdtOp], *, local: bool = True) -> None:
        """Queue what changed for the next presence fan-out (the latest per entry); in a
        cluster, what this node's connections changed goes to the other nodes with it."""
        ops = list(ops)
        due = self._presence_due.setdefault(stream, {})
        for op in ops:
            due[(op.slot_id, op.key or "")] = op
        if local:
            self._presence_renew(stream, ops)
        if due:
            self._presence_flusher.soon()
        else:
            del self._presence_due[stream]
        self._tick_soon()

    def _presence_renew(self, stream: str, ops: Iterable[CrdtOp]) -> None:
        """In a cluster, queue values this node's connections set (changed or only renewed)
        for the other nodes: the latest per entry, sent with the next presence fan-out."""
        if self.presence_carrier is None:
            return
        out = self._presence_publish.get(stream)
        for op in ops:
            if out is None:
                out = self._presence_publish[stream] = {}
            out[(op.slot_id, op.key or "")] = op
        if out:
            self._presence_flusher.soon()

    def _flush_presence(self) -> None:
        due, self._presence_due = self._presence_due, {}
        for name, ops in due.items():
            stream = self.core.streams.get(name)
            if stream is not None and ops:
                self._fan_out(stream.audience(), list(ops.values()))
        out, self._presence_publish = self._presence_publish, {}
        if self.presence_carrier is not None:
            for name, ops in out.items():
                self.presence_carrier.publish(name, list(ops.values()))

    def _tick_soon(self) -> None:
        """Check for expired values again a quarter TTL (at most a second) from now, while
        any are held."""
        if self._ticking is not None or not len(self.presence):
            return
        wait = min(self.presence.ttl / 4, 1.0)
        self._ticking = asyncio.get_running_loop().call_later(wait, self._tick)

    def _tick(self) -> None:
        self._ticking = None
        now = asyncio.get_running_loop().time()
        for stream, ends in self.presence.expire(now, _wall_ms()).items():
            self._presence_out(stream, [op for op, local in ends if local])
            self._presence_out(stream, [op for op, local in ends if not local], local=False)
        self._tick_soon()

    def _fan_out(self, audience: Audience, ops: list[CrdtOp]) -> None:
        """The ops to every reader: whole to those without node grants (encoded once per
        dialect), filtered once per rule set to the others."""
        self.send(audience.whole, CrdtSync(ops=tuple(ops)))
        for group in audience.narrowed.values():
            visible = group[0].readable(ops)
            if visible:
                self.send([m.conn for m in group], CrdtSync(ops=visible))

    def send(self, conns: Iterable[ConnId], sync: CrdtSync) -> None:
        """Encode ``sync`` once per framing and queue it for each of ``conns``."""
        encoded: dict[str, bytes] = {}
        rt = self.rt
        hub = rt.hub
        for conn in conns:
            framing = self._framing.get(conn)
            if framing is None:
                continue
            data = encoded.get(framing.key)
            if data is None:
                data = encoded[framing.key] = framing.encode(sync)
            if rt.send_now(conn, data):
                continue
            if not hub.send_lossless(conn, data):
                self.rt.fault(conn, Overloaded("this connection fell behind the plane; rejoin"))


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000
