"""Durability acks: after each drain, each producer that asked hears once, of its furthest
committed epoch; a producer that did not ask, or left, hears nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.server.durable_acks import DurableAcks

CONNS = st.integers(1, 4)
Step = tuple[str, int, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), CONNS, st.integers(0, 50)),
        st.tuples(st.just("drain"), st.just(0), st.just(0)),
        st.tuples(st.just("leave"), CONNS, st.just(0)),
    ),
    max_size=60,
)


@given(STEPS, st.sets(CONNS))
def test_each_drain_acks_each_listener_once_with_its_furthest_epoch(
    steps: list[Step], asked: set[int]
) -> None:
    acks = DurableAcks()
    heard: list[tuple[int, object, int]] = []
    for conn in asked:
        acks.listeners[conn] = lambda stream, epoch, conn=conn: heard.append((conn, stream, epoch))
    listening = set(asked)
    due: dict[int, int] = {}
    for kind, conn, epoch in steps:
        if kind == "commit":
            acks.frame_durable(conn, f"s{conn}", epoch)
            due[conn] = max(due.get(conn, epoch), epoch)
        elif kind == "leave":
            acks.listeners.pop(conn, None)
            listening.discard(conn)
        else:
            heard.clear()
            acks.send()
            expected = {(c, f"s{c}", e) for c, e in due.items() if c in listening}
            assert sorted(heard) == sorted(expected)
            assert len(heard) == len({c for c, _, _ in heard})
            due.clear()
