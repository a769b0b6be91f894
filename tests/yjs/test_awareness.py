"""Awareness as y-protocols applies it, per connection, bounded; a leaving connection's
clients removed with clock + 1 and a null state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import MalformedYjsMessage, YjsUpdateTooLarge
from octosync.yjs.awareness import NULL, DocumentAwareness, Entry, decode_entries, encode_entries

entries = st.builds(
    Entry,
    client=st.integers(0, 5),
    clock=st.integers(0, 6),
    state=st.sampled_from([NULL, '{"user":"a"}', '{"cursor":3}']),
)


@given(st.lists(entries, max_size=8))
def test_entries_round_trip(listed: list[Entry]) -> None:
    assert decode_entries(encode_entries(listed), max_state_bytes=64, max_entries=8) == listed


def test_states_must_be_json_within_the_bound() -> None:
    with pytest.raises(MalformedYjsMessage):
        decode_entries(encode_entries([Entry(1, 1, "{nope")]), max_state_bytes=64, max_entries=8)
    with pytest.raises(YjsUpdateTooLarge):
        decode_entries(
            encode_entries([Entry(1, 1, '"' + "x" * 70 + '"')]), max_state_bytes=64, max_entries=8
        )
    with pytest.raises(YjsUpdateTooLarge):
        decode_entries(
            encode_entries([Entry(i, 1, NULL) for i in range(9)]), max_state_bytes=64, max_entries=8
        )


def y_protocols(
    known: dict[int, tuple[int, str | None]], entries: list[Entry]
) -> dict[int, tuple[int, str | None]]:
    """``applyAwarenessUpdate``'s rule, on (clock, state) per client (None: removed)."""
    out = dict(known)
    for e in entries:
        clock, state = out.get(e.client, (0, None))
        if clock < e.clock or (clock == e.clock and e.state == NULL and state is not None):
            out[e.client] = (e.clock, None if e.state == NULL else e.state)
    return out


@given(st.lists(st.lists(entries, max_size=4), max_size=8))
def test_one_connection_follows_y_protocols_rule(messages: list[list[Entry]]) -> None:
    doc = DocumentAwareness(max_clients=100)
    model: dict[int, tuple[int, str | None]] = {}
    for message in messages:
        doc.apply(1, message)
        model = y_protocols(model, message)
    held = {e.client: e.state for e in doc.states()}
    assert held == {c: s for c, (_, s) in model.items() if s is not None}
    for e in doc.states():
        assert model[e.client][0] == e.clock


def test_leaving_removes_with_the_next_clock_and_a_null_state() -> None:
    doc = DocumentAwareness()
    doc.apply(1, [Entry(10, 4, '{"a":1}'), Entry(11, 2, '{"b":1}')])
    doc.apply(2, [Entry(20, 1, '{"c":1}')])
    assert doc.leave(1) == [Entry(10, 5, NULL), Entry(11, 3, NULL)]
    assert [e.client for e in doc.states()] == [20]
    assert doc.apply(3, [Entry(10, 4, '{"a":1}')]) == []  # an older state does not come back
    assert doc.leave(1) == []


def test_another_connections_client_is_skipped_not_taken_over() -> None:
    doc = DocumentAwareness()
    doc.apply(1, [Entry(10, 1, '{"a":1}')])
    assert doc.apply(2, [Entry(10, 9, '{"evil":1}'), Entry(20, 1, '{"b":1}')]) == [
        Entry(20, 1, '{"b":1}')
    ]
    assert {e.client: e.state for e in doc.states()} == {10: '{"a":1}', 20: '{"b":1}'}


def test_a_connection_speaks_for_a_bounded_number_of_clients() -> None:
    doc = DocumentAwareness(max_clients=2)
    doc.apply(1, [Entry(1, 1, "{}"), Entry(2, 1, "{}")])
    with pytest.raises(YjsUpdateTooLarge):
        doc.apply(1, [Entry(3, 1, "{}")])
    assert len(doc.states()) == 2  # nothing of the refused message was taken
