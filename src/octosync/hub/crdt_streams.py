"""Multi-writer streams: the server's replica of each CRDT plane stream and who may write it.

A lazily connection that negotiates ``distributed_crdt`` joins a plane stream instead of a
graph stream. Every connection holding ``write`` on the stream sends ``CrdtSync`` ops; there is
no producer, so the stream lives on with nobody connected. Accepting ops is two steps around
the journal:

1. ``check`` refuses, changing nothing, a frame the writer may not send: no ``write`` grant, an
   op stamped by another peer than the writer's handshake ``peer_id`` (a writer speaks for
   itself only), a stamp further ahead of the server's clock than the allowed drift (it would
   win every later write) or with a logical counter a JavaScript replica cannot hold exactly,
   a state that is not inline bytes, or a replica (or all of them together) past its size.
2. ``commit``, once the journal committed the ops, merges them and says what goes where: the
   ops that changed the replica to every reader but the writer, and all of the frame's ops back
   to the writer as its acknowledgement. Nothing is fanned out before it is durable, so no
   client ever holds an op a restarted server lost.

A token's node grants (``hub.node_views``) narrow a member to some of the document's values:
its ``write`` patterns must match every op's key (``<value>/<kind>/...``, so ``todos/*`` is
the value ``todos``; ``#<slot>`` for an op without a key), and its ``read`` patterns decide
which ops it is sent: the state on joining, the fan-out, the answer to its frontier. The
frontier itself goes whole, as lazily-spec says, so a reader's causal-stability watermark
stays sound.

Merging is the plane's (``crdt/plane.py``): idempotent, so a writer that resends after a lost
acknowledgement changes nothing twice. Sans-I/O: the clock is injected, bytes are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.crdt import collect, text_collect
from octosync.crdt.entries import check_op, is_gc, node_of
from octosync.crdt.plane import (
    MAX_ENTRIES,
    EntryKey,
    PlaneReplica,
    StampKey,
    entry_key,
    stamp_key,
    wins,
)
from octosync.errors import ClockDrift, CrdtValueError, Forbidden, LimitExceeded
from octosync.hub.node_views import NodeRules
from octosync.hub.types import ConnId, Grants, NodeGrants
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp

FEATURE = "distributed_crdt"
"""The handshake feature (lazily-spec's token) that makes a lazily connection a plane member."""

DEFAULT_MAX_DRIFT_MS = 60_000
MAX_FRAME_OPS = 5_000
"""Ops one ``CrdtSync`` frame may carry: the checks of a frame are bounded work (the clients
send at most 500 a frame; the server's own frames carry 1,000)."""
DEFAULT_AWAY_MS = 24 * 3_600_000
"""A writer neither connected nor heard from for this long is no longer a member of the
document's stability watermark: tombstones it has not seen may be collected, and its late ops
on them are refused (``ElementCollected``); it re-takes the document on return."""
MAX_TOTAL_ENTRIES = 2_000_000
"""Entries all plane streams of a server hold together at most: writers cannot grow the
server's memory without bound by spreading entries over many streams."""


@dataclass(slots=True)
class Member:
    conn: ConnId
    stream: str
    peer: int
    read: bool
    write: bool
    rules: NodeRules | None = None
    """The token's node grants on this stream; None: the stream grant covers every value."""

    def readable(self, ops: Iterable[CrdtOp]) -> tuple[CrdtOp, ...]:
        """The ops this member may be sent."""
        rules = self.rules
        if rules is None:
            return tuple(ops)
        return tuple(op for op in ops if rules.allows("read", op.slot_id, op.key))


@dataclass(slots=True)
class Report:
    """What one writing peer has said it has seen of a document, and when it was last here."""

    frontier: dict[int, StampKey] | None = None
    """Its last reported frontier (None: none since this server loaded the document)."""
    last_ms: int = 0
    live: int = 0
    """Its connections to the document now."""


@dataclass(slots=True)
class PlaneStream:
    name: str
    replica: PlaneReplica
    members: dict[ConnId, Member] = field(default_factory=dict)
    ops_accepted: int = 0
    _audience: Audience | None = None
    reports: dict[int, Report] = field(default_factory=dict)
    """Writing peers' reports, for the stability watermark (``crdt/collect.py``)."""
    collected: int = 0
    """Entries of collected tombstones dropped so far."""
    compacted: dict[str, int] = field(default_factory=dict)
    """Each text's stable entries when a compaction pass last looked (``text_collect.
    signature``): a text whose stable entries did not change since is not looked at again."""

    def audience(self) -> Audience:
        """Its readers, sorted by what they may read; kept until a member joins or leaves
        (a fan-out asks for it every few milliseconds, members change rarely)."""
        if self._audience is None:
            whole: list[ConnId] = []
            narrowed: dict[NodeRules, list[Member]] = {}
            for m in self.members.values():
                if m.read:
                    if m.rules is None:
                        whole.append(m.conn)
                    else:
                        narrowed.setdefault(m.rules, []).append(m)
            readers = frozenset(whole).union(*([m.conn for m in g] for g in narrowed.values()))
            self._audience = Audience(tuple(whole), narrowed, readers)
        return self._audience

    def changed_members(self) -> None:
        self._audience = None


@dataclass(frozen=True, slots=True)
class Audience:
    """A plane stream's readers: those sent every op, those sent what their node grants let
    them read (grouped by rule set, so each group's ops are filtered and encoded once)."""

    whole: tuple[ConnId, ...]
    narrowed: Mapping[NodeRules, list[Member]]
    readers: frozenset[ConnId]


@dataclass(frozen=True, slots=True)
class Checked:
    """A frame that passed ``check``: what the journal stores and ``commit`` merges."""

    conn: ConnId
    stream: str
    ops: tuple[CrdtOp, ...]


@dataclass(frozen=True, slots=True)
class Accepted:
    """What ``commit`` decided: ``fanout`` to ``readers``, ``ack`` back to ``writer``."""

    stream: str
    writer: ConnId
    fanout: tuple[CrdtOp, ...]
    ack: tuple[CrdtOp, ...]
    members: Mapping[ConnId, Member] = field(repr=False, compare=False)

    @property
    def readers(self) -> tuple[ConnId, ...]:
        """The stream's readers but the writer, asked for when needed: a commit does not walk
        every member (with a thousand readers that walk was a fifth of the server's time, and
        the plane fans out a whole turn's commits at once anyway)."""
        return tuple(m.conn for m in self.members.values() if m.read and m.conn != self.writer)


class CrdtStreams:
    """Every plane stream of one server."""

    def __init__(
        self,
        clock_ms: Callable[[], int],
        *,
        max_drift_ms: int = DEFAULT_MAX_DRIFT_MS,
        max_entries: int = MAX_ENTRIES,
        max_total_entries: int = MAX_TOTAL_ENTRIES,
        away_ms: int = DEFAULT_AWAY_MS,
    ) -> None:
        self._clock = clock_ms
        self.away_ms = away_ms
        self.max_drift_ms = max_drift_ms
        self.max_entries = max_entries
        self.max_total_entries = max_total_entries
        self.total_entries = 0
        self.streams: dict[str, PlaneStream] = {}
        self._members: dict[ConnId, Member] = {}
        self.replica_position = 0
        """In a cluster, the op stream's sequence up to which other nodes' batches are merged
        and journaled here (restored from the journal at start-up)."""

    def _stream(self, name: str) -> PlaneStream:
        stream = self.streams.get(name)
        if stream is None:
            stream = self.streams[name] = PlaneStream(name, PlaneReplica(self.max_entries))
        return stream

    def join(self, conn: ConnId, name: str, peer: int, grants: Grants) -> tuple[CrdtOp, ...]:
        """Add a member; returns the stream's whole state for it (empty without ``read``)."""
        read, write = grants.allows(name, "read"), grants.allows(name, "write")
        if not (read or write):
            raise Forbidden(f"no read or write grant on stream {name!r}", path="session_id")
        rules = grants.node_rules(name) if isinstance(grants, NodeGrants) else None
        member = Member(conn, name, peer, read, write, rules)
        stream = self._stream(name)
        stream.members[conn] = member
        stream.changed_members()
        self._members[conn] = member
        if write:
            report = stream.reports.setdefault(peer, Report())
            report.live += 1
            report.last_ms = self._clock()
        return member.readable(stream.replica.ops()) if read else ()

    def leave(self, conn: ConnId) -> None:
        member = self._members.pop(conn, None)
        if member is None:
            return
        stream = self.streams.get(member.stream)
        if stream is None:  # dropped while it had members (its load failed)
            return
        stream.members.pop(conn, None)
        stream.changed_members()
        report = stream.reports.get(member.peer)
        if member.write and report is not None:
            report.live -= 1
            report.last_ms = self._clock()
        if not stream.members and not len(stream.replica):
            del self.streams[member.stream]  # never written: joining names costs nothing kept

    def is_member(self, conn: ConnId) -> bool:
        return conn in self._members

    def stream_of(self, conn: ConnId) -> str | None:
        member = self._members.get(conn)
        return None if member is None else member.stream

    def state_for(self, conn: ConnId) -> tuple[CrdtOp, ...]:
        """The whole state ``conn`` may read of its stream (what ``join`` returns)."""
        member = self._members[conn]
        stream = self.streams.get(member.stream)
        if stream is None or not member.read:
            return ()
        return member.readable(stream.replica.ops())

    def drop(self, name: str) -> None:
        """Let a stream go from memory (a cluster node that holds documents by interest no
        longer needs it; JetStream holds it). Its members, if any, stay members of nothing."""
        stream = self.streams.pop(name, None)
        if stream is not None:
            self.total_entries -= len(stream.replica)

    def check(self, conn: ConnId, sync: CrdtSync) -> Checked:
        """Refuse (typed, nothing changed) what ``conn`` may not write; see the module doc."""
        member = self._members[conn]
        if not member.write and sync.ops:
            raise Forbidden(f"no write grant on stream {member.stream!r}", path="ops")
        if len(sync.ops) > MAX_FRAME_OPS:
            raise LimitExceeded(
                f"{len(sync.ops)} ops in one frame, over the limit of {MAX_FRAME_OPS}", path="ops"
            )
        horizon = self._clock() + self.max_drift_ms
        rules = member.rules
        replica = self.streams[member.stream].replica
        latest: dict[EntryKey, CrdtOp] = {}  # each entry as the frame's earlier ops leave it
        for i, op in enumerate(sync.ops):
            if rules is not None and not rules.allows("write", op.slot_id, op.key):
                raise Forbidden(
                    f"no write grant on {op.key or f'#{op.slot_id}'} of stream {member.stream!r}",
                    path=f"ops[{i}].key",
                )
            if op.stamp.peer != member.peer:
                raise Forbidden(
                    f"op stamped by peer {op.stamp.peer}; this connection is peer {member.peer}",
                    path=f"ops[{i}].stamp.peer",
                )
            if op.stamp.logical > MAX_SAFE_INTEGER:  # a JavaScript replica could not order it
                raise LimitExceeded(
                    f"logical counter {op.stamp.logical} is above 2**53",
                    path=f"ops[{i}].stamp.logical",
                )
            if op.stamp.wall_time > horizon:
                raise ClockDrift(
                    f"op stamped {op.stamp.wall_time - horizon + self.max_drift_ms} ms ahead "
                    f"of the server's clock (limit {self.max_drift_ms} ms)",
                    path=f"ops[{i}].stamp.wall_time",
                )
            key = entry_key(op)
            held = latest.get(key) or replica.get(op.slot_id, op.key)

            def lookup(other: str, node: int = op.slot_id) -> CrdtOp | None:
                return latest.get((node, other)) or replica.get(node, other)

            check_op(op, member.peer, held, f"ops[{i}]", lookup)
            if held is None or wins(op, held):
                latest[key] = op
        fresh = replica.check(sync.ops)
        if self.total_entries + fresh > self.max_total_entries:
            raise LimitExceeded(
                f"the server's shared documents would hold {self.total_entries + fresh} "
                f"entries, over its limit of {self.max_total_entries}",
                path="ops",
            )
        return Checked(conn, member.stream, sync.ops)

    def commit(self, checked: Checked) -> Accepted:
        """Merge ops the journal committed; see the module doc for who gets what."""
        stream = self._stream(checked.stream)
        before = len(stream.replica)
        changed = tuple(stream.replica.merge(checked.ops))
        self._purge(stream, changed)
        self.total_entries += len(stream.replica) - before
        stream.ops_accepted += len(checked.ops)
        return Accepted(checked.stream, checked.conn, changed, checked.ops, stream.members)

    def restore(self, name: str, ops: Iterable[CrdtOp]) -> None:
        """Merge journaled ops at start-up (before any connection)."""
        self.merge_remote(name, ops)

    def merge_remote(self, name: str, ops: Iterable[CrdtOp]) -> tuple[CrdtOp, ...]:
        """Merge ops another node of the cluster accepted (its write checks were made there);
        returns those that changed the replica."""
        stream = self._stream(name)
        replica = stream.replica
        before = len(replica)
        changed = tuple(replica.merge(ops))
        self._purge(stream, changed)
        self.total_entries += len(replica) - before
        return changed

    def state_of(self, name: str) -> tuple[CrdtOp, ...]:
        stream = self.streams.get(name)
        return () if stream is None else stream.replica.ops()

    def delta_for(self, conn: ConnId, sync: CrdtSync) -> tuple[CrdtOp, ...]:
        """A reader's frontier answered with the entries it has not seen (none without
        ``read``, or when the frame carries no frontier)."""
        member = self._members[conn]
        if not member.read or not sync.frontier:
            return ()
        return member.readable(self.streams[member.stream].replica.delta_for(sync.frontier))

    # --- collecting tombstones (crdt/collect.py) -----------------------------------------------

    def report(self, conn: ConnId, frontier: Iterable[tuple[int, WireStamp]]) -> None:
        """A writer said what it has seen (a frame's frontier)."""
        member = self._members[conn]
        stream = self.streams.get(member.stream)
        if not member.write or stream is None:
            return
        report = stream.reports.setdefault(member.peer, Report())
        held = stream.replica.frontier_peers()  # others' stamps cannot count: kept bounded
        report.frontier = {peer: stamp_key(s) for peer, s in frontier if peer in held}
        report.last_ms = self._clock()

    def _purge(self, stream: PlaneStream, changed: Iterable[CrdtOp]) -> None:
        """A ``NAME/gc`` entry that won drops the tombstones it makes collectable."""
        for op in changed:
            if is_gc(op):
                stream.collected += len(collect.purge(stream.replica, op))

    def members_of(self, name: str) -> list[dict[int, StampKey]]:
        """The frontiers the stability watermark is the minimum of: every writing peer
        connected or here within ``away_ms`` (one that has reported nothing yet has seen
        nothing), and every peer that wrote the document within ``away_ms`` and has not
        reported since this server loaded it."""
        stream = self.streams[name]
        now = self._clock()
        out = []
        for report in stream.reports.values():
            if report.live or now - report.last_ms <= self.away_ms:
                out.append(report.frontier or {})
        for peer, stamp in stream.replica.frontier():
            if (
                peer != collect.SERVER_PEER
                and peer not in stream.reports
                and now - stamp.wall_time <= self.away_ms
            ):
                out.append({})
        return out

    def watermark(self, name: str) -> collect.Watermark:
        """The document's stability watermark now (per peer, the lowest stamp every member
        has seen from it; see ``members_of``)."""
        stream = self.streams.get(name)
        if stream is None:
            return {}
        frontier = {p: stamp_key(s) for p, s in stream.replica.frontier()}
        return collect.watermark(self.members_of(name), frontier)

    def collect(self, name: str, mark: collect.Watermark | None = None) -> list[CrdtOp]:
        """The ops that collect the tombstones ``mark`` (by default the watermark now) makes
        collectable: a ``NAME/gc`` entry per list with one, and the rewrites of each text's
        chunks its writers have left (``text_collect``). None when nothing would go. Bounded
        by the document's size; the caller journals them like any op."""
        stream = self.streams.get(name)
        if stream is None:
            return []
        replica = stream.replica
        if mark is None:
            mark = self.watermark(name)
        removals: dict[str, list[tuple[str, CrdtOp]]] = {}
        texts: dict[str, list[CrdtOp]] = {}
        server_stamp: WireStamp | None = None
        for op in replica.held():
            parts = (op.key or "").split("/")
            if op.stamp.peer == collect.SERVER_PEER and (
                server_stamp is None or stamp_key(op.stamp) > stamp_key(server_stamp)
            ):
                server_stamp = op.stamp
            if len(parts) < 3 or op.slot_id != node_of(parts[0]):
                continue
            if len(parts) == 3 and parts[1] == "ld":
                removals.setdefault(parts[0], []).append((parts[2], op))
            elif len(parts) == 4 and parts[1] in text_collect.TEXT_TAGS:
                texts.setdefault(parts[0], []).append(op)
        out = []
        now = self._clock()
        for text_name, ops in sorted(texts.items()):
            seen = text_collect.signature(ops, mark)
            if stream.compacted.get(text_name) == seen:
                continue  # nothing became stable since a look that found nothing to collect
            rewrites = text_collect.compact(text_name, ops, mark, server_stamp, now)
            if not rewrites:
                stream.compacted[text_name] = seen
            else:
                out.extend(rewrites)
                server_stamp = rewrites[-1].stamp
        for list_name, held in sorted(removals.items()):
            node = node_of(list_name)
            old = replica.get(node, f"{list_name}/{collect.GC_TAG}")
            try:
                prev = collect.decode(old.state) if old is not None else {}
            except CrdtValueError:
                prev = {}
            published = collect.raised(prev, mark)
            if (
                collect.collectable(held, published)
                and len(published) <= collect.MAX_WATERMARK_PEERS
            ):
                gc = collect.gc_op(node, list_name, published, server_stamp, now)
                out.append(gc)
                server_stamp = gc.stamp  # every op the server writes goes above the last
        return out
