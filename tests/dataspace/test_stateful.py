"""The skeleton index against the brute-force oracle, over random histories.

Both dataspaces get the same operations; every observer must receive the same events in the
same order from both, and both must agree on how many copies of each value are present.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from octosync.dataspace import BruteForceDataspace, Dataspace
from octosync.errors import UnknownHandle
from tests.dataspace.helpers import PATTERNS, SOME_VALUES, Recorder, abstraction, typed


class IndexMatchesOracle(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.index = Dataspace()
        self.oracle = BruteForceDataspace()
        self.index_log = Recorder()
        self.oracle_log = Recorder()
        self.assertions: dict[int, Any] = {}  # live assertion handle -> value
        self.observers: dict[int, Any] = {}  # live observer handle -> pattern
        self.seen_values: list[Any] = []

    def _both_observe(self, pattern: Any) -> None:
        name = f"o{len(self.observers)}-{len(self.index_log.events)}"
        h1 = self.index.observe(pattern, **self.index_log.callbacks(name))
        h2 = self.oracle.observe(pattern, **self.oracle_log.callbacks(name))
        assert h1 == h2
        self.observers[h1] = pattern

    @rule(value=SOME_VALUES)
    def assert_value(self, value: Any) -> None:
        h1 = self.index.assert_(value)
        h2 = self.oracle.assert_(value)
        assert h1 == h2
        self.assertions[h1] = value
        self.seen_values.append(value)

    @rule(data=st.data())
    def retract_assertion(self, data: st.DataObject) -> None:
        if not self.assertions:
            return
        h = data.draw(st.sampled_from(sorted(self.assertions)))
        self.index.retract(h)
        self.oracle.retract(h)
        del self.assertions[h]

    @rule(data=st.data())
    def observe(self, data: st.DataObject) -> None:
        if self.seen_values and data.draw(st.booleans()):
            value = data.draw(st.sampled_from(self.seen_values))
            pattern = data.draw(abstraction(value))
        else:
            pattern = data.draw(PATTERNS)
        self._both_observe(pattern)

    @rule(data=st.data())
    def stop_observing(self, data: st.DataObject) -> None:
        if not self.observers:
            return
        h = data.draw(st.sampled_from(sorted(self.observers)))
        self.index.retract(h)
        self.oracle.retract(h)
        del self.observers[h]

    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        if self.seen_values and data.draw(st.booleans()):
            message = data.draw(st.sampled_from(self.seen_values))
        else:
            message = data.draw(SOME_VALUES)
        self.index.send(message)
        self.oracle.send(message)

    @rule(data=st.data(), asserts=st.lists(SOME_VALUES, max_size=3))
    def patch(self, data: st.DataObject, asserts: list[Any]) -> None:
        live = sorted(self.assertions) + sorted(self.observers)
        retracts = (
            data.draw(st.lists(st.sampled_from(live), unique=True, max_size=3)) if live else []
        )
        new1 = self.index.patch(asserts=asserts, retracts=retracts)
        new2 = self.oracle.patch(asserts=asserts, retracts=retracts)
        assert new1 == new2
        for h in retracts:
            self.assertions.pop(h, None)
            self.observers.pop(h, None)
        self.assertions.update(zip(new1, asserts, strict=True))
        self.seen_values.extend(asserts)

    @rule(data=st.data())
    def retract_unknown(self, data: st.DataObject) -> None:
        live = set(self.assertions) | set(self.observers)
        h = data.draw(st.integers(min_value=-2, max_value=60).filter(lambda x: x not in live))
        before = [self.index.count(v) for v in self.seen_values]
        with pytest.raises(UnknownHandle):
            self.index.retract(h)
        with pytest.raises(UnknownHandle):
            self.oracle.retract(h)
        assert [self.index.count(v) for v in self.seen_values] == before

    @invariant()
    def same_events_per_observer(self) -> None:
        if not hasattr(self, "index"):
            return
        got, want = typed(self.index_log.events), typed(self.oracle_log.events)
        names = {name for name, _k, _c in got} | {name for name, _k, _c in want}
        for name in names:
            assert [e for e in got if e[0] == name] == [e for e in want if e[0] == name], name

    @invariant()
    def same_counts(self) -> None:
        if not hasattr(self, "index"):
            return
        for v in self.seen_values[-8:]:
            assert self.index.count(v) == self.oracle.count(v)

    def teardown(self) -> None:
        if not hasattr(self, "index"):
            return
        # Remove everything: the index must clean up all leaves and constant maps.
        for h in sorted(self.observers) + sorted(self.assertions):
            self.index.retract(h)
        index = self.index._index
        assert index.extra == {}
        stack = [index.root]
        while stack:
            node = stack.pop()
            assert node.cont.cache == {}
            assert node.cont.table == {}, "constant maps must be pruned with their handlers"
            stack.extend(n for classes in node.edges.values() for n in classes.values())


# max_examples comes from the hypothesis profile (60 in "ci"; HYPOTHESIS_PROFILE=thorough for more)
IndexMatchesOracle.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestIndexMatchesOracle = IndexMatchesOracle.TestCase
