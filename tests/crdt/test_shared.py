"""The shared document's entry layout: node ids, names, and values a peer cannot spoil."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.shared import SharedState, node_of
from octosync.errors import CrdtValueError
from octosync.ipc.messages import CrdtOp, WireStamp


def test_node_ids_are_fnv1a_64_low_48_bits() -> None:
    # the JS client pins the same two values (clients/js/test/document.test.mjs)
    assert node_of("clicks") == 97025182709940
    assert node_of("é") == 25321904020993
    assert node_of("") == 0xCBF29CE484222325 & 0xFFFF_FFFF_FFFF


def test_names_are_one_key_segment_and_values_json() -> None:
    state = SharedState(1, lambda: 1)
    with pytest.raises(CrdtValueError):
        state.set("a/b", 1)
    with pytest.raises(CrdtValueError):
        state.set("a", object())
    with pytest.raises(CrdtValueError):
        state.add("a", 1.5)  # type: ignore[arg-type]
    with pytest.raises(CrdtValueError):
        SharedState(0, lambda: 1)


def test_a_malformed_entry_from_a_peer_is_skipped_not_fatal() -> None:
    state = SharedState(1, lambda: 1)
    bad = CrdtOp(slot_id=node_of("n"), stamp=WireStamp(5, 0, 2), state=b"{", key="n/pn/2")
    good = CrdtOp(slot_id=node_of("n"), stamp=WireStamp(5, 0, 3), state=b"[4,1]", key="n/pn/3")
    assert state.receive([bad, good]) == {"n"}
    assert state.counter("n") == 3
    foreign = CrdtOp(slot_id=7, stamp=WireStamp(5, 0, 3), state=b"1", key="n/pn/4")
    assert state.receive([foreign]) == set()  # wrong node for the name: not this document's


@given(st.lists(st.integers(-5, 5), max_size=20), st.integers(0, 3))
def test_stamps_always_rise_even_when_the_wall_clock_stalls_or_steps_back(
    amounts: list[int], back: int
) -> None:
    walls = iter([10, 10, 10 - back] * 10)
    state = SharedState(1, lambda: next(walls, 3))
    stamps = [state.add("c", a).stamp for a in amounts]
    keys = [(s.wall_time, s.logical) for s in stamps]
    assert keys == sorted(set(keys))
    assert state.counter("c") == sum(amounts)
