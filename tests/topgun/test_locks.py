"""Locks: one holder at a time, FIFO waiters, TTLs, monotonic fencing tokens (state machine)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.topgun.locks import LockTable

CONNS = st.integers(1, 4)
NAMES = st.sampled_from(["a", "b"])


class LockMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = LockTable()
        self.now = 0
        self.last_token = 0
        self.holders: dict[str, tuple[int, int]] = {}
        self.asked = 0

    def _take(self, grants: list) -> None:  # type: ignore[type-arg]
        for g in grants:
            assert g.fencing_token > self.last_token  # monotonic across every lock
            self.last_token = g.fencing_token
            self.holders[g.name] = (g.conn, g.fencing_token)

    @rule(conn=CONNS, name=NAMES, ttl=st.integers(1, 50))
    def request(self, conn: int, name: str, ttl: int) -> None:
        self.asked += 1
        free = self.table.holder(name) is None
        grants = self.table.request(conn, f"r{self.asked}", name, ttl, self.now)
        assert bool(grants) == free  # granted at once exactly when nobody held it
        self._take(grants)

    @rule(name=NAMES)
    def holder_releases(self, name: str) -> None:
        held = self.table.holder(name)
        if held is None:
            return
        conn, token = held
        released, grants = self.table.release(conn, name, token, self.now)
        assert released
        self.holders.pop(name, None)
        self._take(grants)

    @rule(conn=CONNS, name=NAMES, token=st.integers(0, 30))
    def stranger_release_fails(self, conn: int, name: str, token: int) -> None:
        held = self.table.holder(name)
        if held == (conn, token):
            return
        before = self.table.holder(name)
        released, grants = self.table.release(conn, name, token, self.now)
        assert not released
        assert grants == []
        assert self.table.holder(name) == before

    @rule(conn=CONNS)
    def disconnect(self, conn: int) -> None:
        self._take(self.table.disconnect(conn, self.now))
        for name in ("a", "b"):
            held = self.table.holder(name)
            assert held is None or held[0] != conn or self.holders.get(name) == held

    @rule(dt=st.integers(1, 60))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        self._take(self.table.expire(self.now))

    @invariant()
    def holders_match(self) -> None:
        for name in ("a", "b"):
            held = self.table.holder(name)
            if held is not None:
                assert self.holders[name] == held


TestLocks = LockMachine.TestCase


def test_a_waiter_gets_the_lock_when_the_holder_releases_then_ttl_ends_a_hold() -> None:
    t = LockTable()
    (first,) = t.request(1, "r1", "res", 100, now=0)
    assert t.request(2, "r2", "res", 500, now=1) == []
    released, (second,) = t.release(1, "res", first.fencing_token, now=2)
    assert released
    assert (second.conn, second.request_id) == (2, "r2")
    assert second.fencing_token > first.fencing_token
    assert t.request(3, "r3", "res", 1000, now=3) == []
    assert t.expire(now=501) == []  # the holder's 500 ms are not over yet
    (third,) = t.expire(now=502)
    assert (third.conn, third.request_id) == (3, "r3")
    assert third.fencing_token > second.fencing_token


def test_a_waiter_whose_ttl_passed_is_dropped_silently() -> None:
    t = LockTable()
    t.request(1, "r1", "res", 1000, now=0)
    assert t.request(2, "r2", "res", 10, now=0) == []
    assert t.expire(now=20) == []
    assert t.disconnect(1, now=21) == []  # the only waiter had given up
    assert t.holder("res") is None
