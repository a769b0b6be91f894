"""The alias table as a stateful machine against a plain model: a list of writers, latest last."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.cluster.writer_aliases import WriterAliases

CAPACITY = 4


class AliasMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count(1000)
        self.table = WriterAliases(lambda: next(self.ids), CAPACITY)
        self.latest: list[tuple[str, int]] = []
        self.given: dict[tuple[str, int], int] = {}
        self.retired: set[int] = set()

    @rule(node=st.sampled_from(["n1", "n2", "n3"]), peer=st.integers(1, 4))
    def ask(self, node: str, peer: int) -> None:
        key = (node, peer)
        alias = self.table.alias(node, peer)
        if key in self.latest:
            assert alias == self.given[key]  # a writer kept keeps its id
            self.latest.remove(key)
        else:
            assert alias not in self.given.values()  # never another writer's id
            assert alias not in self.retired
            if len(self.latest) == CAPACITY:
                self.retired.add(self.given.pop(self.latest.pop(0)))
            self.given[key] = alias
        self.latest.append(key)

    @invariant()
    def answers_go_back_to_the_writer(self) -> None:
        assert len(self.table) == len(self.latest) <= CAPACITY
        for key in self.latest:
            assert self.table.origin(self.given[key]) == key
        for alias in self.retired:
            assert self.table.origin(alias) is None


TestAliasMachine = AliasMachine.TestCase


def test_a_table_holds_at_least_one_writer() -> None:
    with pytest.raises(ValueError, match="capacity"):
        WriterAliases(lambda: 1, 0)
