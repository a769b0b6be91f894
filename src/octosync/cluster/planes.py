"""Shared documents (CRDT plane streams) across the nodes of a cluster, sans-I/O.

The I/O side (``links/cluster_planes.py``) moves bytes through NATS JetStream and performs what
this module decides; the merge itself is the plane's (``crdt/plane.py``), the same one a node
applies to its own writers' ops.

Decisions:

- **Every node keeps a whole replica of every document**, as TopGun maps do: a document has
  no owner and no producer, so there is nothing to claim. Each frame of ops a node's writers
  send is journaled there, then published once to one JetStream op stream
  (``octosync_<cluster>_planes``), cut by :func:`pack` at a size bound; only once JetStream
  stored it are the ops merged, fanned out and echoed back as the writer's acknowledgement, so
  an acknowledged op is on the node's disk *and* in JetStream.
- **Every node applies every other node's batches** through the plane's merge, which is
  commutative, associative and idempotent: an op delivered twice, replayed after a restart, or
  seen through both the stream and a repair counts once, whatever the order (a counter is one
  entry per writer holding that writer's totals, never a sum of deliveries). :class:`Intake`
  skips what this process published itself and sequences it has passed, to save the work; a
  batch an earlier run of the node published is applied.
- **Catching up is replaying the stream from the position journaled last.** The position rides
  in the journal record of the remote ops it ends, so a position on disk implies its ops are.
- **Anti-entropy repairs what the stream did not carry** (ops journaled whose publish never got
  an ack, a purged stream): every ``interval`` each node broadcasts a root per *settled*
  document (no change here for ``settle`` seconds); a node whose root differs sends the sender
  its :func:`digests` (one order-free hash per bucket of entries) and pulls, in pages, the ops of
  the buckets that differ (:class:`Walk`, :func:`answer`). It only pulls; the other node pulls
  when it hears this node's roots, so both converge. The plane's per-peer frontier is not used
  between nodes: a writer that moves between nodes delivers its ops to them along different
  paths, so "seen up to this stamp" does not hold there.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b

from octosync.cluster.rounds import LogStats, Position, Rounds
from octosync.crdt.plane import EntryKey, PlaneReplica, entry_key, state_bytes
from octosync.ipc.messages import CrdtOp
from octosync.wire.cluster_planes import (
    BUCKETS,
    PlaneBatch,
    RepairReply,
    RepairRequest,
)

DEFAULT_MAX_BATCH_BYTES = 256 * 1024
"""Below NATS's default 1 MB payload bound, with room for the envelope."""
OP_OVERHEAD = 64
"""Bytes an op takes besides its state and key (node, stamp, framing), for the bound."""
MASK64 = (1 << 64) - 1


def op_size(op: CrdtOp) -> int:
    return len(state_bytes(op)) + len(op.key or "") + OP_OVERHEAD


def pack(ops: Sequence[CrdtOp], max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> list[list[CrdtOp]]:
    """``ops`` as batches of at most ``max_bytes`` each, in order (a larger op goes alone)."""
    out: list[list[CrdtOp]] = []
    batch: list[CrdtOp] = []
    size = 0
    for op in ops:
        cost = op_size(op)
        if batch and size + cost > max_bytes:
            out.append(batch)
            batch, size = [], 0
        batch.append(op)
        size += cost
    if batch:
        out.append(batch)
    return out


@dataclass(slots=True)
class PlaneStats(LogStats):
    """For ``/metrics`` (``octosync_cluster_planes_*``)."""

    merged: int = 0
    """Remote ops that changed a document here."""


class Intake(Position):
    """Batches read from the op stream: which ops this node merges, and how far it got."""

    def take(self, seq: int, batch: PlaneBatch) -> tuple[CrdtOp, ...]:
        """The ops of the batch at stream sequence ``seq`` to merge: none for this process's
        own batches or a sequence already passed."""
        return tuple(batch.ops) if self.admit(seq, batch.node) else ()


# --- digests --------------------------------------------------------------------------------


def bucket_of(key: EntryKey) -> int:
    """The bucket of an entry: the same on every node (CRC-32 of its node and key)."""
    node, name = key
    return zlib.crc32(name.encode(), node & 0xFFFFFFFF) % BUCKETS


def op_hash(op: CrdtOp) -> int:
    """A 64-bit hash of everything that makes an entry's winner (stamp, state, address)."""
    h = blake2b(digest_size=8)
    s = op.stamp
    h.update(f"{op.slot_id}:{op.key or ''}:{s.wall_time}:{s.logical}:{s.peer}:".encode())
    h.update(state_bytes(op))
    return int.from_bytes(h.digest(), "big")


def digests(replica: PlaneReplica) -> tuple[int, ...]:
    """Per bucket, the wrapping sum of its entries' hashes: equal buckets hold equal winners
    (up to a 64-bit collision), whatever order the entries were merged in."""
    sums = [0] * BUCKETS
    for op in replica.ops():
        b = bucket_of(entry_key(op))
        sums[b] = (sums[b] + op_hash(op)) & MASK64
    return tuple(sums)


def root(sums: Sequence[int]) -> int:
    """One hash of a document's bucket digests (0 for an empty document)."""
    if not any(sums):
        return 0
    h = blake2b(digest_size=8)
    for s in sums:
        h.update(s.to_bytes(8, "big"))
    return int.from_bytes(h.digest(), "big")


def answer(
    request: RepairRequest,
    replica: PlaneReplica,
    max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ours: tuple[int, ...] | None = None,
) -> RepairReply:
    """A peer's digests answered with this node's ops of every bucket that differs, in entry
    order after ``request.after``, cut at ``max_bytes`` (``resume``: where the next page starts).
    ``ours``: this replica's digests, if known."""
    if ours is None:
        ours = digests(replica)
    differing = {b for b in range(BUCKETS) if ours[b] != request.digests[b]}
    after = None if request.after is None else (request.after[0], request.after[1])
    out: list[CrdtOp] = []
    size = 0
    for op in replica.ops():  # in entry order
        key = entry_key(op)
        if (after is not None and key <= after) or bucket_of(key) not in differing:
            continue
        cost = op_size(op)
        if out and size + cost > max_bytes:
            last = entry_key(out[-1])
            return RepairReply(request.stream, out, resume=(last[0], last[1]))
        out.append(op)
        size += cost
    return RepairReply(request.stream, out)


@dataclass(slots=True)
class Walk:
    """One pull of a document from one peer, page by page."""

    stream: str
    peer: str
    node: str
    sums: tuple[int, ...] = ()

    def start(self, sums: tuple[int, ...]) -> RepairRequest:
        """The first page's request, with this node's digests of the document."""
        self.sums = sums
        return RepairRequest(self.node, self.stream, list(sums))

    def on_reply(self, reply: RepairReply) -> RepairRequest | None:
        """The next page's request, or None when the reply was the last."""
        if reply.resume is None:
            return None
        return RepairRequest(self.node, self.stream, list(self.sums), after=reply.resume)


@dataclass(frozen=True, slots=True)
class RepairTiming:
    interval: float = 30.0
    """Seconds between two broadcasts of this node's roots."""
    settle: float = 2.0
    """A document changed on this node within this many seconds is not compared."""
    max_reply_bytes: int = DEFAULT_MAX_BATCH_BYTES


class Repair(Rounds["Walk"]):
    """Anti-entropy for one node: which documents to announce, which to pull from whom."""

    def __init__(
        self, node: str, clock: Callable[[], float], timing: RepairTiming | None = None
    ) -> None:
        self.timing = timing or RepairTiming()
        super().__init__(node, clock, self.timing.interval, self.timing.settle)
        self._sums: dict[str, tuple[int, int, tuple[int, ...]]] = {}

    def sums(self, name: str, replica: PlaneReplica) -> tuple[int, ...]:
        """The document's digests, computed again only when it changed since last asked (a
        large settled document is hashed once, not on every round and request)."""
        known = self._sums.get(name)
        if known is not None and known[0] == id(replica) and known[1] == replica.version:
            return known[2]
        sums = digests(replica)
        self._sums[name] = (id(replica), replica.version, sums)
        return sums

    def roots(self, replicas: Mapping[str, PlaneReplica]) -> dict[str, int]:
        """The root of every settled document this node holds an entry of."""
        return {
            name: root(self.sums(name, r))
            for name, r in sorted(replicas.items())
            if len(r) and self.settled(name)
        }

    def heard(
        self, peer: str, roots: Mapping[str, int], replicas: Mapping[str, PlaneReplica]
    ) -> list[Walk]:
        """A peer's roots: a walk for each settled document whose root differs here (none for
        one that is being pulled already)."""

        def differs(name: str, theirs: int) -> bool:
            replica = replicas.get(name)
            return (0 if replica is None else root(self.sums(name, replica))) != theirs

        return self._heard(peer, roots, differs, lambda name: Walk(name, peer, self.node))

    def finished(self, walk: Walk) -> None:
        self._finish(walk.stream, walk)


def pull(
    walk: Walk,
    ask: Callable[[RepairRequest], RepairReply],
    replica: PlaneReplica,
    merge: Callable[[Sequence[CrdtOp]], object],
) -> int:
    """Run a walk to its end against ``ask`` (a peer's :func:`answer`, in-process), merging
    each page with ``merge``; returns how many ops came. The I/O side runs the same steps
    over NATS."""
    got = 0
    request: RepairRequest | None = walk.start(digests(replica))
    while request is not None:
        reply = ask(request)
        merge(reply.ops)
        got += len(reply.ops)
        request = walk.on_reply(reply)
    return got
