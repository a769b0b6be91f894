"""Single-value CRDTs: LWW register, multi-value register, PN counter.

Every ``merge`` returns whether the *observable value* changed, so a reactive layer above can
skip invalidation when a merge only advanced metadata (the seed's "equal values invalidate
nothing" rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

import msgspec

from octosync.crdt.timestamp import Timestamp

T = TypeVar("T")

VersionVector = Mapping[str, int]


class LWWRegister(Generic[T]):
    """Last write wins by HLC timestamp (node id breaks millis/counter ties)."""

    __slots__ = ("ts", "value")

    def __init__(self, value: T | None = None, ts: Timestamp | None = None) -> None:
        self.value = value
        self.ts = ts

    def set(self, value: T, ts: Timestamp) -> bool:
        return self.merge(LWWRegister(value, ts))

    def merge(self, other: LWWRegister[T]) -> bool:
        if other.ts is None:
            return False
        if self.ts is not None and (other.ts, value_order(other.value)) <= (
            self.ts,
            value_order(self.value),
        ):
            return False
        changed = other.value != self.value or self.ts is None
        self.value, self.ts = other.value, other.ts
        return changed

    def state(self) -> tuple[T | None, Timestamp | None]:
        return self.value, self.ts


def value_order(value: object) -> bytes:
    """Tie-break for two writes with one timestamp (a clock misuse): larger MsgPack bytes win."""
    try:
        return msgspec.msgpack.encode(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value).encode()


def _dominates(a: VersionVector, b: VersionVector) -> bool:
    """``a`` has seen everything ``b`` has (a >= b pointwise)."""
    return all(a.get(node, 0) >= n for node, n in b.items())


class MVRegister(Generic[T]):
    """Multi-value register: concurrent writes all survive until a write that saw them.

    Each entry is ``(value, version vector)``. A local write by ``node`` gets the join of every
    current vector with ``node``'s entry bumped, so it dominates (replaces) all of them. Merge
    keeps the entries no other entry strictly dominates, so an old replica can never bring back
    a superseded value.
    """

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[T, dict[str, int]]] = []

    def set(self, node: str, value: T) -> dict[str, int]:
        vv: dict[str, int] = {}
        for _, seen in self.entries:
            for n, c in seen.items():
                vv[n] = max(vv.get(n, 0), c)
        vv[node] = vv.get(node, 0) + 1
        self.entries = [(value, vv)]
        return dict(vv)

    def values(self) -> list[T]:
        """Concurrent values, in a replica-independent order (by version vector)."""
        ordered = sorted(self.entries, key=lambda e: sorted(e[1].items()))
        return [value for value, _ in ordered]

    def merge(self, other: MVRegister[T]) -> bool:
        before = self.values()
        pool = list(self.entries)
        for value, vv in other.entries:
            if not any(v == value and seen == vv for v, seen in pool):
                pool.append((value, dict(vv)))
        kept = [
            (value, vv)
            for value, vv in pool
            if not any(seen != vv and _dominates(seen, vv) for _, seen in pool)
        ]
        self.entries = kept
        return self.values() != before

    def state(self) -> list[tuple[T, list[tuple[str, int]]]]:
        return sorted(
            ((value, sorted(vv.items())) for value, vv in self.entries), key=lambda e: e[1]
        )


class PNCounter:
    """Per-node positive and negative tallies; the value is their difference (TopGun's p/n)."""

    __slots__ = ("n", "p")

    def __init__(self, p: Mapping[str, int] | None = None, n: Mapping[str, int] | None = None):
        self.p: dict[str, int] = dict(p or {})
        self.n: dict[str, int] = dict(n or {})

    @property
    def value(self) -> int:
        return sum(self.p.values()) - sum(self.n.values())

    def increment(self, node: str, amount: int = 1) -> int:
        if amount == 0:
            return self.value
        side = self.p if amount >= 0 else self.n
        side[node] = side.get(node, 0) + abs(amount)
        return self.value

    def merge(self, other: PNCounter) -> bool:
        before = self.value
        for mine, theirs in ((self.p, other.p), (self.n, other.n)):
            for node, count in theirs.items():
                if count > mine.get(node, 0):
                    mine[node] = count
        return self.value != before

    def state(self) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        return sorted(self.p.items()), sorted(self.n.items())
