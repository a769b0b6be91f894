"""TopGun maps across the nodes of a cluster: what is published, applied and repaired (sans-I/O).

The I/O side (``links/cluster_maps.py``) moves bytes through NATS JetStream and performs what
this module decides; the merge itself is the TopGun core's (``TopGunCore.apply_remote``).

Decisions:

- **One op stream for every map**, in JetStream (subjects ``<prefix>.m.<map>``). Each batch of
  op records a node's TopGun core accepted (after its grant checks, made once, there) is
  published once, one message per map (:func:`pack`: cut at a size bound); reserved maps
  (``$topgun/``: fencing tokens, counters, stream positions) are each node's own and never
  published.
- **Every node applies every other node's batches** through the same merge as its own ops.
  LWW and OR merges are commutative, associative and idempotent, so the order between nodes,
  a batch delivered twice or replayed after a restart change nothing (:class:`Intake` still
  skips the batches its own process published and sequences it has passed, to save the
  work; a batch an earlier run of the node published is applied, since its records may have
  been acknowledged by JetStream before that run's journal committed them).
- **Catching up is replaying the stream from the position journaled last.** The position is
  journaled after the records it covers, in one queue, so a position on disk implies its
  records are on disk; a node with no journal replays the whole stream.
- **Anti-entropy repairs what the stream did not carry** (batches published while NATS was
  away, a stream cut by its limits, a journal lost): every ``interval`` each node broadcasts
  the Merkle root of each *settled* map (no write on this node for ``settle`` seconds: roots
  of maps being written differ only by what is in flight); a node whose own root of a settled
  map differs walks the sender's tree (:class:`Walk`: inner levels, then the differing leaves
  with the entry hashes it holds, at most ``max_leaves`` per round) and folds the records that
  come back. It only pulls; the other side pulls when it hears this node's roots, so both
  converge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from octosync.cluster.rounds import LogStats, Position, Rounds
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.op import OpRecord
from octosync.errors import InvalidBucketPath
from octosync.store.records import KIND_OP, EncodedRecord
from octosync.topgun.durable import is_reserved
from octosync.wire.cluster_maps import (
    MAX_PATHS,
    BucketsReply,
    BucketsRequest,
    LeavesReply,
    LeavesRequest,
    OpBatch,
    Refused,
)

DEFAULT_MAX_BATCH_BYTES = 256 * 1024
"""Below NATS's default 1 MB payload bound, with room for the envelope."""
RECORD_OVERHEAD = 96
"""Bytes a record takes besides its key and value (names, timestamp, op id), for the bound."""


class MapSource(Protocol):
    """What repair reads of a node's maps (``crdt.fold.MapStore``)."""

    def merkle(self, map_name: str) -> MerkleTree: ...

    def records_for(self, map_name: str, key: str) -> list[OpRecord]: ...

    def maps(self) -> list[str]: ...


def pack(
    records: Iterable[EncodedRecord], max_bytes: int = DEFAULT_MAX_BATCH_BYTES
) -> list[tuple[str, list[bytes]]]:
    """Op records to publish, as ``(map, bodies)`` batches: one map each, in the order given,
    each at most ``max_bytes`` (a single larger record goes alone); reserved maps left out."""
    open_: dict[str, tuple[list[bytes], int]] = {}
    out: list[tuple[str, list[bytes]]] = []
    for rec in records:
        if rec.kind != KIND_OP or is_reserved(rec.scope):
            continue
        bodies, size = open_.get(rec.scope, ([], 0))
        if bodies and size + len(rec.body) > max_bytes:
            out.append((rec.scope, bodies))
            bodies, size = [], 0
        bodies.append(rec.body)
        open_[rec.scope] = (bodies, size + len(rec.body))
    out.extend((name, bodies) for name, (bodies, _) in open_.items() if bodies)
    return out


def cut(
    records: Sequence[OpRecord], max_bytes: int = DEFAULT_MAX_BATCH_BYTES
) -> list[list[OpRecord]]:
    """Records of one map as batches of at most about ``max_bytes`` each, in order (a larger
    record goes alone): a map's records published at once (a node's journal, seeded)."""
    out: list[list[OpRecord]] = []
    batch: list[OpRecord] = []
    size = 0
    for rec in records:
        cost = len(rec.value) + len(rec.key) + RECORD_OVERHEAD
        if batch and size + cost > max_bytes:
            out.append(batch)
            batch, size = [], 0
        batch.append(rec)
        size += cost
    if batch:
        out.append(batch)
    return out


@dataclass(slots=True)
class MapStats(LogStats):
    """For ``/metrics`` (``octosync_cluster_maps_*``)."""

    applied: int = 0
    """Remote records that changed a map here."""


class Intake(Position):
    """Batches read from the op stream: which records this node applies, and how far it got."""

    def take(self, seq: int, batch: OpBatch) -> list[OpRecord]:
        """The records of the batch at stream sequence ``seq`` to apply: none for this node's
        own batches or a sequence already passed; reserved maps never."""
        if not self.admit(seq, batch.node):
            return []
        return [rec for rec in batch.records if not is_reserved(rec.map)]


@dataclass(frozen=True, slots=True)
class RepairTiming:
    interval: float = 30.0
    """Seconds between two broadcasts of this node's roots."""
    settle: float = 2.0
    """A map written on this node within this many seconds is not compared."""
    max_leaves: int = 256
    """Leaves pulled per map per round; more differing leaves wait for the next round."""
    max_reply_bytes: int = DEFAULT_MAX_BATCH_BYTES
    """What this node puts in one answer to a leaf request at most (the rest: next round)."""


@dataclass(slots=True)
class Walk:
    """One pull of a map from one peer: down the inner levels where hashes differ, then the
    differing leaves."""

    map: str
    peer: str
    node: str
    max_leaves: int
    leaves: list[str] = field(default_factory=list)

    def start(self) -> BucketsRequest:
        return BucketsRequest(self.node, self.map, [""])

    def on_buckets(
        self, reply: BucketsReply, tree: MerkleTree
    ) -> BucketsRequest | LeavesRequest | None:
        """The next request, or None when nothing differs (any more)."""
        differing: list[str] = []
        for path in sorted(reply.buckets):
            if len(path) >= tree.depth:
                continue
            theirs = reply.buckets[path]
            ours = tree.buckets(path)
            for digit in sorted(set(theirs) | set(ours)):
                if theirs.get(digit, 0) != ours.get(digit, 0):
                    differing.append(path + digit)
        if not differing:
            return None
        if len(differing[0]) < tree.depth:
            return BucketsRequest(self.node, self.map, differing[:MAX_PATHS])
        self.leaves = differing[: self.max_leaves]
        return LeavesRequest(self.node, self.map, {p: tree.leaf(p) for p in self.leaves})


def answer(
    request: BucketsRequest | LeavesRequest,
    source: MapSource,
    max_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> BucketsReply | LeavesReply | Refused:
    """A peer's repair request, answered from this node's maps."""
    tree = source.merkle(request.map)
    try:
        if isinstance(request, BucketsRequest):
            return BucketsReply(request.map, {p: tree.buckets(p) for p in request.paths})
        records: list[OpRecord] = []
        size = 0
        for path, have in sorted(request.have.items()):
            for key, h in sorted(tree.leaf(path).items()):
                if have.get(key) == h:
                    continue
                recs = source.records_for(request.map, key)
                cost = sum(len(r.value) + len(r.key) + RECORD_OVERHEAD for r in recs)
                if records and size + cost > max_bytes:
                    return LeavesReply(request.map, records, complete=False)
                records.extend(recs)
                size += cost
        return LeavesReply(request.map, records)
    except InvalidBucketPath as exc:
        return Refused(exc.message)


class Repair(Rounds["Walk"]):
    """Anti-entropy for one node: which maps to announce, which to pull from whom."""

    def __init__(
        self, node: str, clock: Callable[[], float], timing: RepairTiming | None = None
    ) -> None:
        self.timing = timing or RepairTiming()
        super().__init__(node, clock, self.timing.interval, self.timing.settle)
        self._known: set[str] = set()

    def know(self, names: Iterable[str]) -> None:
        """Maps this node holds (read once at start; later ones arrive through :meth:`written`)."""
        self._known.update(n for n in names if not is_reserved(n))

    def written(self, names: Iterable[str]) -> None:
        """These maps changed on this node now (a local write or an applied batch)."""
        mine = [n for n in names if not is_reserved(n)]
        self._known.update(mine)
        super().written(mine)

    def roots(self, source: MapSource) -> dict[str, int]:
        """The root of every settled map this node knows."""
        return {n: source.merkle(n).root() for n in sorted(self._known) if self.settled(n)}

    def heard(self, peer: str, roots: Mapping[str, int], source: MapSource) -> list[Walk]:
        """A peer's roots: a walk for each settled map whose root differs here (none for a map
        that is being pulled already)."""
        return self._heard(
            peer,
            roots,
            lambda name, theirs: not is_reserved(name) and source.merkle(name).root() != theirs,
            lambda name: Walk(name, peer, self.node, self.timing.max_leaves),
        )

    def finished(self, walk: Walk) -> None:
        self._finish(walk.map, walk)


def pull(
    walk: Walk,
    ask: Callable[[BucketsRequest | LeavesRequest], BucketsReply | LeavesReply | Refused],
    source: MapSource,
) -> list[OpRecord]:
    """Run a walk to its end against ``ask`` (a peer's :func:`answer`, in-process): the records
    to fold. The I/O side runs the same steps with requests over NATS."""
    request: BucketsRequest | LeavesRequest | None = walk.start()
    while request is not None:
        reply = ask(request)
        if isinstance(reply, LeavesReply):
            return reply.records
        if not isinstance(reply, BucketsReply):
            return []
        request = walk.on_buckets(reply, source.merkle(walk.map))
    return []
