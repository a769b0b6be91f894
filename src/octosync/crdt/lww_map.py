"""LWW-Map: per key last-write-wins records with tombstones, optional TTL and a Merkle tree.

A removal is a record whose value is ``None`` (a tombstone), so a late, older write cannot
bring the key back. Tombstones are dropped only by :meth:`LWWMap.prune` with a watermark that
every replica has passed. The Merkle tree is kept in step with every accepted record (O(depth)).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from octosync.crdt.hlc import HLC
from octosync.crdt.merkle import DEFAULT_DEPTH, MerkleTree
from octosync.crdt.registers import value_order
from octosync.crdt.timestamp import Timestamp


class LWWRecord(msgspec.Struct, frozen=True):
    """``value`` ``None`` is a tombstone; ``ttl_ms`` makes the value expire at millis + ttl."""

    value: Any
    timestamp: Timestamp
    ttl_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.ttl_ms is not None and self.timestamp.millis + self.ttl_ms <= now_ms


def _wins(new: LWWRecord, cur: LWWRecord) -> bool:
    if new.timestamp != cur.timestamp:
        return new.timestamp > cur.timestamp
    return value_order(new.value) > value_order(cur.value)


class LWWMap:
    def __init__(self, hlc: HLC, merkle_depth: int = DEFAULT_DEPTH) -> None:
        self.hlc = hlc
        self._records: dict[str, LWWRecord] = {}
        self.merkle = MerkleTree(merkle_depth)

    # local writes ---------------------------------------------------------------------------
    def set(self, key: str, value: Any, ttl_ms: int | None = None) -> LWWRecord:
        rec = LWWRecord(value, self.hlc.now(), ttl_ms)
        self._store(key, rec)
        return rec

    def remove(self, key: str) -> LWWRecord:
        rec = LWWRecord(None, self.hlc.now())
        self._store(key, rec)
        return rec

    # replication ----------------------------------------------------------------------------
    def merge(self, key: str, rec: LWWRecord) -> bool:
        """Accept a remote record if newer; ``True`` only when the visible value changed."""
        self.hlc.update(rec.timestamp)
        cur = self._records.get(key)
        if cur is not None and not _wins(rec, cur):
            return False
        self._store(key, rec)
        return cur is None or cur.value != rec.value or cur.ttl_ms != rec.ttl_ms

    def copy(self, hlc: HLC) -> LWWMap:
        """A replica with the same records and tree, stamping its own writes with ``hlc``."""
        twin = LWWMap(hlc, self.merkle.depth)
        twin._records = dict(self._records)
        twin.merkle = self.merkle.copy()
        return twin

    def merge_map(self, other: LWWMap) -> int:
        """Merge every record of ``other``; returns how many keys changed value."""
        return sum(1 for key, rec in other.records() if self.merge(key, rec))

    def _store(self, key: str, rec: LWWRecord) -> None:
        self._records[key] = rec
        self.merkle.update(key, rec.timestamp)

    # reads ----------------------------------------------------------------------------------
    def get(self, key: str, now_ms: int | None = None) -> Any:
        """The live value, or ``None`` when absent, removed or expired at ``now_ms``."""
        rec = self._records.get(key)
        if rec is None or (now_ms is not None and rec.expired(now_ms)):
            return None
        return rec.value

    def record(self, key: str) -> LWWRecord | None:
        return self._records.get(key)

    def records(self) -> Iterator[tuple[str, LWWRecord]]:
        return iter(list(self._records.items()))

    def items(self, now_ms: int | None = None) -> dict[str, Any]:
        return {
            k: r.value
            for k, r in self._records.items()
            if r.value is not None and not (now_ms is not None and r.expired(now_ms))
        }

    def __len__(self) -> int:
        return len(self._records)

    def state(self) -> dict[str, LWWRecord]:
        return dict(self._records)

    # garbage collection ---------------------------------------------------------------------
    def prune(self, watermark: Timestamp) -> list[str]:
        """Drop tombstones older than ``watermark`` (every replica has seen them)."""
        dead = [k for k, r in self._records.items() if r.value is None and r.timestamp < watermark]
        for key in dead:
            del self._records[key]
            self.merkle.remove(key)
        return dead

    # sync source ----------------------------------------------------------------------------
    def leaf_records(self, path: str) -> list[tuple[str, LWWRecord]]:
        return [(k, self._records[k]) for k in sorted(self.merkle.leaf(path))]
