"""The example game: rules, the audit that exposes loss and duplication, fair consumption."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from octosync.chain.game import BOARD, PER_DEVICE, compute, consumed_sequencers
from octosync.chain.json_tree import merge_patch
from octosync.chain.records import Event


def ev(c: int, device: str, d: int, kind: str, **payload: object) -> Event:
    return Event(device, d, c, kind, json.dumps(payload))


def run(state: object, events: list[Event]) -> object:
    return merge_patch(state, compute(state, events).change)


def test_join_move_score() -> None:
    state = run(
        None,
        [
            ev(1, "a", 1, "join", name="Ann"),
            ev(2, "a", 2, "move", dx=3, dy=-1),
            ev(3, "a", 3, "score", points=5),
            ev(4, "b", 1, "move", dx=1, dy=1),  # not joined: consumed, no effect
            ev(5, "a", 4, "move", dx=1000, dy=0),
            ev(6, "a", 5, "dance"),
            Event("a", 6, 7, "move", "not json"),
        ],
    )
    assert isinstance(state, dict)
    assert state["players"] == {"a": {"name": "Ann", "x": BOARD, "y": -1, "score": 5}}
    assert state["audit"]["a"] == {"n": 6, "ranges": [[1, 6]], "dup": 0}
    assert state["audit"]["b"] == {"n": 1, "ranges": [[1, 1]], "dup": 0}


def test_a_second_consumption_shows_as_dup() -> None:
    state = run(None, [ev(1, "a", 1, "join", name="x")])
    state = run(state, [ev(2, "a", 1, "join", name="x"), ev(3, "a", 3, "score", points=1)])
    assert isinstance(state, dict)
    assert state["audit"]["a"] == {"n": 2, "ranges": [[1, 1], [3, 3]], "dup": 1}
    assert consumed_sequencers(state, "a") == {1, 3}


def test_at_most_per_device_events_of_one_device_per_call() -> None:
    events = [ev(c, "a", c, "score", points=1) for c in range(1, 13)] + [ev(13, "b", 1, "join")]
    change = compute(None, events)
    assert change.event_kill == (*range(1, PER_DEVICE + 1), 13)


@given(st.lists(st.integers(1, 40), unique=True, max_size=30))
def test_ranges_hold_exactly_the_consumed_sequencers(ds: list[int]) -> None:
    state: object = None
    for i, d in enumerate(ds):
        state = run(state, [ev(i + 1, "a", d, "wave")])
    assert consumed_sequencers(state, "a") == set(ds)
