"""The chain's state as cells: a subscriber's mirror, fed what a ``Publisher`` sends, holds
every state applied, one delta per state, whatever the keys (nameable or not)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.chain.state_cells import SEQUENCER, WHOLE, StateCells, layout, nameable, state_of
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher

scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.sampled_from(["players", "audit", "round", "a/b", "$x", "", "x" * 1025]) | st.text(
    min_size=1, max_size=4
)
states = st.dictionaries(keys, values, max_size=4) | values


def test_layout_is_one_cell_per_key_or_one_whole_cell() -> None:
    assert layout({"players": {"a": 1}, "round": 3}, 7) == {
        "players": {"a": 1},
        "round": 3,
        SEQUENCER: 7,
    }
    assert layout({"a/b": 1}, 1) == {WHOLE: {"a/b": 1}, SEQUENCER: 1}
    assert layout({"$sequencer": 1}, 2) == {WHOLE: {"$sequencer": 1}, SEQUENCER: 2}
    assert layout([1, 2], 3) == {WHOLE: [1, 2], SEQUENCER: 3}
    assert layout(None, 0) == {WHOLE: None, SEQUENCER: 0}
    assert not nameable("")
    assert not nameable("x" * 1025)
    assert nameable("x" * 1024)


def test_unchanged_keys_are_not_in_the_delta() -> None:
    cells = StateCells()
    publisher = Publisher(cells.ctx, PeerPermissions.allow_all())
    cells.apply({"players": {"a": 1}, "audit": {"a": [1, 1]}}, 1)
    publisher.snapshot()
    publisher.drain()
    cells.apply({"players": {"a": 2}, "audit": {"a": [1, 1]}}, 2)
    (delta,) = publisher.drain()
    players = cells.ctx.named("players").id
    sequencer = cells.ctx.named(SEQUENCER).id
    assert sorted(op.slot_id for op in delta.ops) == sorted([players, sequencer])  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(st.lists(states, min_size=1, max_size=8))
def test_a_mirror_holds_every_state_with_one_delta_per_state(history: list[Any]) -> None:
    cells = StateCells()
    cells.apply(history[0], 1)
    publisher = Publisher(cells.ctx, PeerPermissions.allow_all())
    mirror = Mirror()
    mirror.apply(publisher.snapshot())
    publisher.drain()
    assert state_of(_by_name(mirror)) == (history[0], 1)
    for sequencer, state in enumerate(history[1:], start=2):
        before = mirror.last_epoch
        cells.apply(state, sequencer)
        deltas = publisher.drain()
        assert len(deltas) == 1  # the sequencer changed: exactly one flush
        for delta in deltas:
            mirror.apply(delta)
        assert mirror.in_sync
        assert mirror.last_epoch == (before or 0) + 1
        assert state_of(_by_name(mirror)) == (state, sequencer)
        assert cells.sequencer == sequencer


def _by_name(mirror: Mirror) -> dict[str, Any]:
    values = mirror.values()
    return {name: values[i] for name, i in mirror.names().items()}
