"""Random turns from several connections, over the wire codec, against the in-process Dataspace.

The oracle is ``dataspace.Dataspace`` driven directly with the same assertions, retractions,
messages and observers. After every step each live wire observer must hold exactly the capture
vectors the oracle's observer holds, and must have received the same messages, in order.
Connections come and go (a close, or a bad turn that the relay refuses and the face closes):
what they asserted is retracted in both.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from octosync.dataspace import Dataspace
from octosync.dataspace.values import Capture, Record, Symbol, _, key
from octosync.errors import OctosyncError
from octosync.syndicate.values import from_wire
from octosync.wire.syndicate import Retract, TurnEvent
from tests.syndicate.helpers import Net, WirePeer, bind, discard, group_rec, lit, observe, rec, sym

P, Q = Symbol("P"), Symbol("Q")
PATTERNS: list[tuple[Any, Any]] = [
    (group_rec(sym("P"), bind(), discard()), Record(P, Capture(_), _)),
    (group_rec(sym("P"), lit(1), bind()), Record(P, 1, Capture(_))),
    (group_rec(sym("P"), bind(), bind()), Record(P, Capture(_), Capture(_))),
    (group_rec(sym("Q"), bind()), Record(Q, Capture(_))),
    (group_rec(sym("P"), bind(lit(2)), lit("y")), Record(P, Capture(2), "y")),
]
values = st.one_of(
    st.builds(lambda a, b: rec("P", a, b), st.integers(0, 2), st.sampled_from(["x", "y"])),
    st.builds(lambda a: rec("Q", a), st.integers(0, 2)),
)


def no_refs(wire: object) -> Any:
    raise AssertionError("no refs in these values")


def local(v: Any) -> Any:
    return from_wire(v, no_refs)


class OracleObserver:
    def __init__(self) -> None:
        self.current: dict[Any, Any] = {}
        self.messages: list[Any] = []

    def add(self, caps: tuple[Any, ...]) -> None:
        k = key(list(caps))
        assert k not in self.current
        self.current[k] = caps

    def remove(self, caps: tuple[Any, ...]) -> None:
        del self.current[key(list(caps))]

    def message(self, caps: tuple[Any, ...]) -> None:
        self.messages.append(key(list(caps)))


class RelayAgainstDataspace(RuleBasedStateMachine):
    assertions = Bundle("assertions")
    observers = Bundle("observers")

    def __init__(self) -> None:
        super().__init__()
        self.net = Net()
        self.oracle = Dataspace()
        self.conns: list[WirePeer] = [self.net.peer() for _ in range(3)]
        self.oracle_handles: dict[tuple[int, int], int] = {}
        """(conn id, wire handle) -> oracle handle, for what is live."""
        self.watching: dict[tuple[int, int], OracleObserver] = {}
        """(conn id, observer OID) -> the oracle's view of that observer."""
        self.observer_of: dict[tuple[int, int], tuple[int, int]] = {}
        """(conn id, wire handle of an Observe) -> (conn id, observer OID)."""
        self.next_oid = 100

    def _peer(self, i: int) -> WirePeer:
        return self.conns[i % len(self.conns)]

    @rule(target=assertions, i=st.integers(0, 2), value=values)
    def assert_value(self, i: int, value: Any) -> tuple[int, int]:
        p = self._peer(i)
        h = p.publish(p.dataspace_oid(), value)
        self.oracle_handles[(p.id, h)] = self.oracle.assert_(local(value))
        return (p.id, h)

    @rule(target=observers, i=st.integers(0, 2), which=st.integers(0, len(PATTERNS) - 1))
    def observe(self, i: int, which: int) -> tuple[int, int]:
        p = self._peer(i)
        wire, pattern = PATTERNS[which]
        oid = self.next_oid
        self.next_oid += 1
        o = OracleObserver()
        h = p.publish(p.dataspace_oid(), observe(wire, oid))
        self.oracle_handles[(p.id, h)] = self.oracle.observe(pattern, o.add, o.remove, o.message)
        self.watching[(p.id, oid)] = o
        self.observer_of[(p.id, h)] = (p.id, oid)
        return (p.id, h)

    @rule(item=consumes(assertions) | consumes(observers))
    def retract(self, item: tuple[int, int]) -> None:
        conn_id, h = item
        oracle = self.oracle_handles.pop(item, None)
        if oracle is None:  # its connection is gone: already retracted
            return
        self.net.peers[conn_id].retract(1, h)
        self.oracle.retract(oracle)
        watched = self.observer_of.pop(item, None)
        if watched is not None:  # the relay retracted its matches from it: nothing is left
            assert self.net.peers[conn_id].live.get(watched[1], {}) == {}
            del self.watching[watched]

    @rule(i=st.integers(0, 2), value=values)
    def message(self, i: int, value: Any) -> None:
        p = self._peer(i)
        p.message(p.dataspace_oid(), value)
        self.oracle.send(local(value))

    @rule(i=st.integers(0, 2), bad=st.booleans())
    def replace_connection(self, i: int, bad: bool) -> None:
        """Close connection ``i`` (cleanly, or as the face does after refusing a bad turn)
        and open a fresh one in its place."""
        p = self._peer(i)
        if bad:
            with pytest.raises(OctosyncError):
                p.send(TurnEvent(p.dataspace_oid(), Retract(10**9)))
        p.close()
        for item in [k for k in self.oracle_handles if k[0] == p.id]:
            self.oracle.retract(self.oracle_handles.pop(item))
        for w in [k for k in self.watching if k[0] == p.id]:
            del self.watching[w]
        self.conns[i % len(self.conns)] = self.net.peer()

    @invariant()
    def every_observer_agrees_with_the_oracle(self) -> None:
        for (conn_id, oid), o in self.watching.items():
            p = self.net.peers[conn_id]
            wire = sorted(repr(key(local(list(v)))) for v in p.live.get(oid, {}).values())
            assert wire == sorted(repr(key(list(c))) for c in o.current.values())
            got = [key(local(list(m))) for m in p.messages.get(oid, [])]
            assert got == o.messages

    @invariant()
    def the_dataspaces_hold_as_many_handles(self) -> None:
        # The relay's dataspace also holds each connection's resolve-free assertions only.
        assert len(self.net.relay.dataspace("demo").space) == len(self.oracle)


RelayAgainstDataspace.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestRelayAgainstDataspace = RelayAgainstDataspace.TestCase
