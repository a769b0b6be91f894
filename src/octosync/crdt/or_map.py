"""OR-Map: a multi-value map, add-wins, observed-remove with unique tags.

Each add carries a tag (the adding node's HLC timestamp as ``millis:counter:nodeId``, unique
because an HLC never repeats). A remove tombstones only the tags its replica had observed, so a
concurrent add (a tag the remover never saw) survives: add wins. Tombstones are kept until
:meth:`ORMap.prune` is given a watermark every replica has passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from octosync.crdt.hlc import HLC
from octosync.crdt.timestamp import Timestamp


class ORRecord(msgspec.Struct, frozen=True):
    value: Any
    tag: str
    timestamp: Timestamp


class ORMap:
    def __init__(self, hlc: HLC) -> None:
        self.hlc = hlc
        self._live: dict[str, dict[str, ORRecord]] = {}
        self._tombstones: dict[str, Timestamp] = {}  # tag -> when it was removed

    # local writes ---------------------------------------------------------------------------
    def add(self, key: str, value: Any) -> ORRecord:
        ts = self.hlc.now()
        rec = ORRecord(value, str(ts), ts)
        self._live.setdefault(key, {})[rec.tag] = rec
        return rec

    def remove(self, key: str, value: Any = None) -> list[str]:
        """Tombstone the observed tags of ``key`` (only those holding ``value`` if given)."""
        bucket = self._live.get(key, {})
        tags = [t for t, r in bucket.items() if value is None or r.value == value]
        self.apply_tombstones(tags, self.hlc.now())
        return tags

    # replication ----------------------------------------------------------------------------
    def apply(self, key: str, rec: ORRecord) -> bool:
        """Accept a remote add; ``True`` when it became visible."""
        self.hlc.update(rec.timestamp)
        if rec.tag in self._tombstones:
            return False
        bucket = self._live.setdefault(key, {})
        if rec.tag in bucket:
            return False
        bucket[rec.tag] = rec
        return True

    def apply_tombstones(self, tags: Iterable[str], removed_at: Timestamp) -> bool:
        """Accept removes; ``True`` when a visible value went away."""
        changed = False
        for tag in tags:
            prior = self._tombstones.get(tag)
            if prior is None or removed_at > prior:
                self._tombstones[tag] = removed_at
            for key in list(self._live):
                bucket = self._live[key]
                if bucket.pop(tag, None) is not None:
                    changed = True
                    if not bucket:
                        del self._live[key]
        return changed

    def merge_map(self, other: ORMap) -> bool:
        changed = False
        by_time: dict[Timestamp, list[str]] = {}
        for tag, at in other._tombstones.items():
            by_time.setdefault(at, []).append(tag)
        for at, tags in by_time.items():
            changed |= self.apply_tombstones(tags, at)
        for key, bucket in other._live.items():
            for rec in bucket.values():
                changed |= self.apply(key, rec)
        return changed

    # reads ----------------------------------------------------------------------------------
    def get(self, key: str) -> list[Any]:
        """Live values of ``key`` ordered by tag."""
        bucket = self._live.get(key, {})
        return [bucket[t].value for t in sorted(bucket)]

    def keys(self) -> list[str]:
        return sorted(self._live)

    def tombstones(self) -> dict[str, Timestamp]:
        return dict(self._tombstones)

    def state(self) -> tuple[dict[str, list[tuple[str, Any]]], dict[str, Timestamp]]:
        live = {k: sorted((t, r.value) for t, r in b.items()) for k, b in self._live.items()}
        return live, dict(self._tombstones)

    # garbage collection ---------------------------------------------------------------------
    def prune(self, watermark: Timestamp) -> list[str]:
        """Forget tombstones removed before ``watermark`` (every replica has seen them)."""
        old = [t for t, at in self._tombstones.items() if at < watermark]
        for tag in old:
            del self._tombstones[tag]
        return old
