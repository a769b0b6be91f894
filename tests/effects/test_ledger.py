"""The lease rule as a hypothesis state machine: holders ask, renew and pause while a clock
runs; at every moment at most one holder's writes pass, and tokens only grow."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.effects.ledger import Decision, Lease, State, acquire, check_held, decide
from octosync.errors import LeaseLost

HOLDERS = ("a", "b", "c")
TTL = 10.0


def test_decisions() -> None:
    assert decide(None) is Decision.FIRE
    assert decide(State.INTENT) is Decision.IN_DOUBT
    assert decide(State.DONE) is Decision.SKIP


def test_a_paused_holder_is_fenced_off() -> None:
    a = acquire(None, "a", TTL, 0.0)
    assert a == Lease("a", 1, 10.0)
    assert acquire(a, "b", TTL, 5.0) is None
    b = acquire(a, "b", TTL, 10.0)  # a's term ended
    assert b == Lease("b", 2, 20.0)
    with pytest.raises(LeaseLost) as info:
        check_held(b, a, 11.0)
    assert info.value.path == "token"
    with pytest.raises(LeaseLost) as info:
        check_held(b, b, 20.0)
    assert info.value.path == "expires"
    check_held(b, b, 19.9)


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.current: Lease | None = None
        self.held: dict[str, Lease] = {}
        self.tokens: list[int] = []

    @rule(holder=st.sampled_from(HOLDERS))
    def ask(self, holder: str) -> None:
        new = acquire(self.current, holder, TTL, self.now)
        if new is None:
            assert self.current is not None
            assert self.current.holder != holder
            assert self.current.expires > self.now
            return
        if self.tokens:
            assert new.token >= self.tokens[-1]
            renewed = self.current is not None and self.current.holder == holder
            assert (new.token == self.tokens[-1]) == (
                renewed and self.current is not None and self.current.expires > self.now
            )
        self.tokens.append(new.token)
        self.current = new
        self.held[holder] = new

    @rule(dt=st.floats(0, 2 * TTL))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @invariant()
    def at_most_one_writer(self) -> None:
        passing = []
        for holder, lease in self.held.items():
            try:
                check_held(self.current, lease, self.now)
            except LeaseLost:
                continue
            passing.append(holder)
        assert len(passing) <= 1


TestLeaseMachine = LeaseMachine.TestCase
