"""The CRDT cell plane's replica: the winning op per ``(node, key)`` and the per-peer frontier.

lazily-spec's distributed plane is state-based: every ``CrdtOp`` carries the converged state of
one entry, stamped with the HLC ``WireStamp`` that produced it, and the receiver keeps, per
``(node, key)``, the op with the greatest stamp under ``(wall_time, logical, peer)``. Merging is
therefore commutative, associative and idempotent, so reordered, duplicated or batched
delivery all converge (lazily-py's ``CrdtPlaneRuntime`` keeps the same winner). Two ops with one
stamp and different states (a clock misuse) are ordered by their state bytes, so even that case
converges instead of keeping whichever arrived first.

The frontier is the highest stamp seen from each peer. ``delta_for`` answers a peer's frontier
with the entries it has not seen, which is sound on an ordered, reliable link (each peer's ops
arrive in stamp order, and a lost link loses a suffix): what a peer has seen from P up to a stamp
it has seen entirely. A sender's frontier is never merged into ours for that reason; over any
other link, ``ops()`` (the whole state) repairs everything.

Sans-I/O, no clock: stamps come in with the ops.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from octosync.errors import CrdtValueError, LimitExceeded
from octosync.ipc.messages import CrdtOp, WireStamp

StampKey = tuple[int, int, int]
EntryKey = tuple[int, str]
"""``(node, key)``; an op without a key has key ``""`` (a key is never empty)."""

MAX_ENTRIES = 100_000
"""Entries one replica holds at most (a server replica refuses ops past it)."""


def stamp_key(stamp: WireStamp) -> StampKey:
    """The total order every replica agrees on: ``(wall_time, logical, peer)``."""
    return (stamp.wall_time, stamp.logical, stamp.peer)


def entry_key(op: CrdtOp) -> EntryKey:
    return (op.slot_id, op.key or "")


def state_bytes(op: CrdtOp) -> bytes:
    """An op's state; the plane carries inline bytes only (a blob reference has no meaning
    outside the process that wrote it)."""
    if not isinstance(op.state, bytes):
        raise CrdtValueError("a CRDT op's state must be inline bytes", path="state")
    return op.state


def wins(new: CrdtOp, old: CrdtOp) -> bool:
    """``new`` replaces ``old``: a greater stamp, or the same stamp and greater state bytes."""
    a, b = stamp_key(new.stamp), stamp_key(old.stamp)
    if a != b:
        return a > b
    return state_bytes(new) > state_bytes(old)


class PlaneReplica:
    """One replica of a plane: ``apply`` reports whether the winning entry changed."""

    __slots__ = ("_entries", "_frontier", "max_entries", "version")

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[EntryKey, CrdtOp] = {}
        self._frontier: dict[int, WireStamp] = {}
        self.max_entries = max_entries
        self.version = 0
        """Winners replaced so far: what is derived from the state (a digest) is still
        current while this has not moved."""

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, ops: Iterable[CrdtOp]) -> int:
        """Raise (and change nothing) if ``ops`` cannot all be applied; else how many entries
        they would add."""
        fresh = set()
        for i, op in enumerate(ops):
            if not isinstance(op.state, bytes):
                raise CrdtValueError("a CRDT op's state must be inline bytes", path=f"ops[{i}]")
            key = entry_key(op)
            if key not in self._entries:
                fresh.add(key)
        if len(self._entries) + len(fresh) > self.max_entries:
            raise LimitExceeded(
                f"the plane would hold {len(self._entries) + len(fresh)} entries, "
                f"over its limit of {self.max_entries}",
                path="ops",
            )
        return len(fresh)

    def apply(self, op: CrdtOp) -> bool:
        """Merge one op; True when it became the entry's winner (the observed state moved)."""
        state_bytes(op)
        peer = op.stamp.peer
        seen = self._frontier.get(peer)
        if seen is None or stamp_key(op.stamp) > stamp_key(seen):
            self._frontier[peer] = op.stamp
        key = entry_key(op)
        old = self._entries.get(key)
        if old is not None and (old == op or not wins(op, old)):
            return False
        self._entries[key] = op
        self.version += 1
        return True

    def merge(self, ops: Iterable[CrdtOp]) -> list[CrdtOp]:
        """Merge a batch; returns the ops that won (in batch order)."""
        return [op for op in ops if self.apply(op)]

    def get(self, node: int, key: str | None) -> CrdtOp | None:
        return self._entries.get((node, key or ""))

    def drop(self, node: int, key: str) -> CrdtOp | None:
        """Forget one entry (a collected tombstone's: ``crdt/collect.py``); returns it. The
        frontier keeps its stamp: what was seen stays seen."""
        op = self._entries.pop((node, key), None)
        if op is not None:
            self.version += 1
        return op

    def held(self) -> Iterable[CrdtOp]:
        """Every entry, unordered (a scan that does not need ``ops()``'s sort)."""
        return self._entries.values()

    def ops(self) -> tuple[CrdtOp, ...]:
        """The whole state, in ``(node, key)`` order (replica-independent)."""
        return tuple(self._entries[k] for k in sorted(self._entries))

    def frontier_peers(self) -> Container[int]:
        """The peers this replica has seen a stamp from."""
        return self._frontier.keys()

    def frontier(self) -> tuple[tuple[int, WireStamp], ...]:
        """The highest stamp seen from each peer, by peer."""
        return tuple(sorted(self._frontier.items()))

    def delta_for(self, frontier: Iterable[tuple[int, WireStamp]]) -> tuple[CrdtOp, ...]:
        """The entries a peer whose frontier is ``frontier`` has not seen (ordered links)."""
        theirs = {peer: stamp_key(s) for peer, s in frontier}
        return tuple(
            op for op in self.ops() if stamp_key(op.stamp) > theirs.get(op.stamp.peer, (-1, -1, -1))
        )
