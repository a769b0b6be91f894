"""PN counters by name: per node, the greatest positive and negative tallies seen (a CRDT).

Merging takes the per-node maximum on each side, so a client's repeated or reordered
``COUNTER_SYNC`` frames converge to one state; the value is ``sum(positive) - sum(negative)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Counter:
    positive: dict[str, int] = field(default_factory=dict)
    negative: dict[str, int] = field(default_factory=dict)
    subscribers: set[int] = field(default_factory=set)

    def merge(self, positive: dict[str, int], negative: dict[str, int]) -> bool:
        """Fold a remote state in; ``True`` when anything grew."""
        changed = False
        for mine, theirs in ((self.positive, positive), (self.negative, negative)):
            for node, count in theirs.items():
                if count > mine.get(node, 0):
                    mine[node] = count
                    changed = True
        return changed

    @property
    def value(self) -> int:
        return sum(self.positive.values()) - sum(self.negative.values())


class CounterTable:
    def __init__(self) -> None:
        self._counters: dict[str, Counter] = {}

    def get(self, name: str) -> Counter:
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Counter()
        return counter

    def restore(self, name: str, positive: dict[str, int], negative: dict[str, int]) -> None:
        """Seed a counter with a journaled state (start-up)."""
        self.get(name).merge(positive, negative)

    def disconnect(self, conn: int) -> None:
        for counter in self._counters.values():
            counter.subscribers.discard(conn)
