"""A stateful-machine base for convergence: replicas, local updates, random pairwise merges.

Subclasses say how to make a replica, apply a drawn local update, merge one replica into
another, and observe a replica's value. The base draws which replica acts and which pairs
merge (the sync order comes from hypothesis), checks every merge is monotone (merging again
changes nothing, and merging into a replica never loses what that replica had already merged),
and at teardown merges everything everywhere and requires identical values.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

R = TypeVar("R")

REPLICAS = 3


class ReplicaMachine(RuleBasedStateMachine, Generic[R]):
    """Base machine; override the four hooks (``local_update`` draws from ``data``)."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas: list[R] = [self.new_replica(i) for i in range(REPLICAS)]
        self.steps = 0

    # hooks --------------------------------------------------------------------------------
    def new_replica(self, index: int) -> R:
        raise NotImplementedError

    def local_update(self, replica: R, index: int, data: st.DataObject) -> None:
        raise NotImplementedError

    def merge_into(self, target: R, source: R) -> None:
        raise NotImplementedError

    def observe(self, replica: R) -> Any:
        raise NotImplementedError

    def dominates(self, after: R, before_value: Any) -> bool:
        """Whether ``after`` includes everything ``before_value`` showed (default: skip)."""
        return True

    # rules --------------------------------------------------------------------------------
    @rule(index=st.integers(0, REPLICAS - 1), data=st.data())
    def update(self, index: int, data: st.DataObject) -> None:
        self.local_update(self.replicas[index], index, data)
        self.steps += 1

    @precondition(lambda self: self.steps > 0)
    @rule(dst=st.integers(0, REPLICAS - 1), src=st.integers(0, REPLICAS - 1))
    def merge(self, dst: int, src: int) -> None:
        t, s = self.replicas[dst], self.replicas[src]
        before = self.observe(t)
        self.merge_into(t, s)
        once = self.observe(t)
        assert self.dominates(t, before), "a merge lost state the target already had"
        self.merge_into(t, s)
        assert self.observe(t) == once, "merging the same state twice changed the value"

    @invariant()
    def replicas_stay_observable(self) -> None:
        for r in self.replicas:
            self.observe(r)

    def teardown(self) -> None:
        # Full sync: gossip round-robin until every replica has seen every other.
        for _ in range(2):
            for i in range(REPLICAS):
                for j in range(REPLICAS):
                    if i != j:
                        self.merge_into(self.replicas[i], self.replicas[j])
        values = [self.observe(r) for r in self.replicas]
        assert all(v == values[0] for v in values), f"replicas diverged after full sync: {values}"
