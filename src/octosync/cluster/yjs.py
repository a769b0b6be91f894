"""``/yjs`` documents across the nodes of a cluster, sans-I/O.

The I/O side (``links/cluster_yjs.py``) moves bytes through NATS JetStream and performs what
this module decides; applying an update is pycrdt's, the same a node does for its own writers.

Decisions:

- **Every node keeps a whole replica of every document.** Each update a node's writers send is
  journaled there, then published once to one JetStream op stream (``octosync_<cluster>_yjs``),
  cut by :func:`pack` at a size bound; only once JetStream stored it is the update applied,
  fanned out and confirmed, so a confirmed update is on the node's disk *and* in JetStream.
- **Every node applies every other node's updates.** Yjs updates commute and apply
  idempotently: an update delivered twice, replayed after a restart, or brought again by a
  repair changes nothing the second time. :class:`~octosync.cluster.rounds.Position` skips
  what this process published itself and sequences it has passed.
- **Catching up is replaying the stream from the position journaled last**, carried by the
  journal record of the remote updates it ends.
- **Anti-entropy compares state vectors.** Every ``interval`` a node broadcasts, for at most
  ``max_documents`` settled documents (in turn, so every one comes round), its :func:`vector`:
  the state vector plus a hash of the delete set (a deletion does not move a state vector). A
  node hearing them pushes, for each settled document it holds more of, ``Doc.get_update`` of
  the peer's state vector (what the peer lacks, one update), up to ``max_push_bytes`` a round
  (or one larger diff alone, up to ``max_diff_bytes``, sent in parts that :class:`Parts` puts
  together); for a document the peer holds more of, it sends its own vector back to that peer
  alone, which answers with the push (and never asks back, so a round ends).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from pycrdt import Doc

from octosync.cluster.rounds import LogStats, Rounds
from octosync.errors import MalformedYjsMessage
from octosync.wire.cluster_yjs import Vector
from octosync.yjs.encoding import Reader

DEFAULT_MAX_BATCH_BYTES = 256 * 1024
"""Below NATS's default 1 MB payload bound, with room for the envelope."""
UPDATE_OVERHEAD = 8
MAX_DIFF_BYTES = 64 << 20
"""The largest diff anti-entropy sends (in parts of ``DEFAULT_MAX_BATCH_BYTES``); past it the
op stream's replay is the only way a document reaches a node."""


def pack(updates: Sequence[bytes], max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> list[list[bytes]]:
    """``updates`` as batches of at most ``max_bytes`` each, in order (a larger one alone)."""
    out: list[list[bytes]] = []
    batch: list[bytes] = []
    size = 0
    for update in updates:
        cost = len(update) + UPDATE_OVERHEAD
        if batch and size + cost > max_bytes:
            out.append(batch)
            batch, size = [], 0
        batch.append(update)
        size += cost
    if batch:
        out.append(batch)
    return out


@dataclass(slots=True)
class YjsClusterStats(LogStats):
    """For ``/metrics`` (``octosync_cluster_yjs_*``)."""

    applied: int = 0
    """Remote updates applied here (from the stream or a repair)."""
    pushed: int = 0
    """Diffs this node sent to a peer that lacked them."""
    too_large: int = 0
    """Diffs not sent: larger than a round's bound (the op stream carries those documents)."""


# --- vectors --------------------------------------------------------------------------------


def read_state_vector(state: bytes) -> dict[int, int]:
    """A Yjs state vector as ``{client: clock}`` (its encoding's order is not fixed)."""
    reader = Reader(state)
    out: dict[int, int] = {}
    for _ in range(reader.var_uint("$.state")):
        client = reader.var_uint("$.state")
        out[client] = reader.var_uint("$.state")
    reader.end("$.state")
    return out


def delete_set_hash(doc: Doc[Any]) -> int:
    """A hash of the document's delete set, whatever order its encoding lists clients in: the
    update of the document against its own state vector holds no struct, only that set."""
    reader = Reader(doc.get_update(doc.get_state()))
    if reader.var_uint("$.update"):
        raise MalformedYjsMessage("structs in an update against the own state", path="$.update")
    ranges: list[tuple[int, int, int]] = []
    for _ in range(reader.var_uint("$.deleted")):
        client = reader.var_uint("$.deleted")
        for _ in range(reader.var_uint("$.deleted")):
            ranges.append((client, reader.var_uint("$.deleted"), reader.var_uint("$.deleted")))
    if not ranges:
        return 0
    h = blake2b(digest_size=8)
    for client, clock, length in sorted(ranges):
        h.update(f"{client}:{clock}:{length};".encode())
    return int.from_bytes(h.digest(), "big")


def vector(doc: Doc[Any]) -> Vector:
    return Vector(doc.get_state(), delete_set_hash(doc))


def ahead(ours: Vector, theirs: Vector) -> bool:
    """Whether ``ours`` may hold something ``theirs`` lacks: a client clock past theirs, or
    another delete set (which side has more is not known from a hash: both send)."""
    mine, other = read_state_vector(ours.state), read_state_vector(theirs.state)
    if any(clock > other.get(client, 0) for client, clock in mine.items()):
        return True
    return ours.deleted != theirs.deleted


def is_empty(doc: Doc[Any]) -> bool:
    return doc.get_state() == b"\x00"


# --- the rounds -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class YjsRepairTiming:
    interval: float = 30.0
    """Seconds between two broadcasts of this node's vectors."""
    settle: float = 2.0
    """A document changed on this node within this many seconds is not compared."""
    max_documents: int = 256
    """Documents whose vectors one broadcast carries."""
    max_push_bytes: int = DEFAULT_MAX_BATCH_BYTES
    """Bytes of diffs one heard broadcast may make this node send..."""
    max_diff_bytes: int = MAX_DIFF_BYTES
    """...or one diff alone up to this size, when it is the round's first."""


@dataclass(frozen=True, slots=True)
class Push:
    """``update`` (what the peer lacks of ``document``) to the peer."""

    document: str
    update: bytes


@dataclass(frozen=True, slots=True)
class Heard:
    """What a peer's vectors call for: diffs to push to it, and the documents it holds more
    of (this node's vectors of them go to it, so it pushes back)."""

    pushes: list[Push]
    asks: dict[str, Vector]
    too_large: int = 0


class YjsRepair(Rounds[str]):
    """Anti-entropy for one node: which vectors to broadcast, what to push to whom."""

    def __init__(
        self, node: str, clock: Callable[[], float], timing: YjsRepairTiming | None = None
    ) -> None:
        self.timing = timing or YjsRepairTiming()
        super().__init__(node, clock, self.timing.interval, self.timing.settle)
        self._turn = ""
        """The last document a broadcast carried: the next starts after it."""

    def vectors(self, docs: Mapping[str, Doc[Any]]) -> dict[str, Vector]:
        """The vectors of up to ``max_documents`` settled, non-empty documents, taking up
        after the last broadcast's (so every document comes round)."""
        names = sorted(n for n, d in docs.items() if self.settled(n) and not is_empty(d))
        if not names:
            return {}
        start = next((i for i, n in enumerate(names) if n > self._turn), 0)
        chosen = (names[start:] + names[:start])[: self.timing.max_documents]
        self._turn = chosen[-1]
        return {name: vector(docs[name]) for name in chosen}

    def heard(
        self,
        peer: str,
        vectors: Mapping[str, Vector],
        docs: Mapping[str, Doc[Any]],
        *,
        answer_only: bool = False,
    ) -> Heard:
        """A peer's vectors (``answer_only``: sent back to this node alone, answering its
        own): diffs of the settled documents this node holds more of, bounded in bytes, and
        (unless ``answer_only``) this node's vectors of those the peer holds more of."""
        if peer == self.node:
            return Heard([], {})
        budget = self.timing.max_push_bytes
        pushes: list[Push] = []
        asks: dict[str, Vector] = {}
        too_large = 0
        for name in sorted(vectors):
            if not self.settled(name):
                continue
            theirs = vectors[name]
            doc = docs.get(name)
            ours = vector(doc) if doc is not None else Vector(b"\x00", 0)
            try:
                more_here = doc is not None and ahead(ours, theirs)
                more_there = ahead(theirs, ours)
            except MalformedYjsMessage:  # a vector that is not one: nothing to do with it
                continue
            if doc is not None and more_here:
                try:
                    update: bytes = doc.get_update(theirs.state)
                except Exception:  # a state vector pycrdt cannot read: nothing to send
                    continue
                if len(update) > budget and (pushes or len(update) > self.timing.max_diff_bytes):
                    too_large += 1
                    continue
                budget = max(0, budget - len(update))
                pushes.append(Push(name, update))
            if not answer_only and more_there:
                asks[name] = ours
        return Heard(pushes, asks, too_large)


def split(update: bytes, size: int = DEFAULT_MAX_BATCH_BYTES) -> list[bytes]:
    """A diff in parts of at most ``size`` bytes (one part when it fits)."""
    return [update[at : at + size] for at in range(0, max(len(update), 1), size)]


class Parts:
    """Diffs arriving in parts, put together per (peer, document). Parts of one diff come in
    order from one publisher; a part out of order drops what was gathered (the next round
    sends the diff again). At most ``max_open`` diffs are gathered at once, each at most
    ``max_bytes``."""

    def __init__(self, max_open: int = 8, max_bytes: int = MAX_DIFF_BYTES) -> None:
        self.max_open = max_open
        self.max_bytes = max_bytes
        self._open: dict[tuple[str, str], list[bytes]] = {}

    def take(self, peer: str, document: str, part: int, parts: int, data: bytes) -> bytes | None:
        """The whole diff once its last part came, else None."""
        if parts == 1:
            return data if part == 0 else None
        key = (peer, document)
        if part == 0:
            self._open.pop(key, None)
            if len(self._open) >= self.max_open:
                del self._open[next(iter(self._open))]  # the oldest gathering gives way
            self._open[key] = []
        gathered = self._open.get(key)
        if gathered is None or len(gathered) != part:
            self._open.pop(key, None)
            return None
        gathered.append(data)
        if sum(map(len, gathered)) > self.max_bytes:
            del self._open[key]
            return None
        if part + 1 < parts:
            return None
        del self._open[key]
        return b"".join(gathered)
