"""The chain game's rules (``examples/chain-game/coin_chase.py``) as the chain runs them: the
state is whatever the merge patches build, events may come in any split into batches (a new
tail computes from wherever the old one stopped), and the game must not notice."""

from __future__ import annotations

import importlib.util
import itertools
import json
from types import ModuleType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from octosync.chain.json_tree import merge_patch
from octosync.chain.records import Event
from tests.conftest import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "coin_chase", ROOT / "examples" / "chain-game" / "coin_chase.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rules = _load()
DEVICES = ("ada", "bob", "cy")

steps = st.sampled_from([-1, 0, 1, 2, True, "1", None])  # 2, true, "1" and null are not steps
payloads = st.one_of(
    st.builds(lambda dx, dy: json.dumps({"dx": dx, "dy": dy}), steps, steps),
    st.builds(lambda n: json.dumps({"name": n}), st.sampled_from(["Ada", "", "x" * 40])),
    st.sampled_from(["", "[]", "{", "null"]),
)
plays = st.lists(
    st.tuples(st.sampled_from(DEVICES), st.sampled_from(["join", "move", "dance"]), payloads),
    max_size=80,
)


def events(played: list[tuple[str, str, str]]) -> list[Event]:
    return [Event(d, i + 1, i + 1, name, payload) for i, (d, name, payload) in enumerate(played)]


def run(batches: list[list[Event]]) -> Any:
    state: Any = None
    for batch in batches:
        change = rules.compute(state, batch)
        assert change.event_kill == tuple(e.chain_sequencer for e in batch)  # all consumed
        state = merge_patch(state, change.change) if change.change else state
    return state


@given(plays, st.lists(st.integers(0, 80), max_size=6))
def test_any_split_into_batches_plays_the_same_game(
    played: list[tuple[str, str, str]], cuts: list[int]
) -> None:
    all_events = events(played)
    bounds = [0, *sorted(min(c, len(all_events)) for c in cuts), len(all_events)]
    batches = [all_events[a:b] for a, b in itertools.pairwise(bounds) if a < b]
    assert run(batches) == run([all_events] if all_events else [])


@given(plays)
def test_players_stay_on_the_board_and_every_coin_taken_is_one_point(
    played: list[tuple[str, str, str]],
) -> None:
    state = run([events(played)]) or {}
    players = state.get("players", {})
    joined = {d for d, name, p in played if name == "join" and "name" in rules._payload(p)}
    assert set(players) <= joined
    for player in players.values():
        assert 0 <= player["x"] < rules.SIZE
        assert 0 <= player["y"] < rules.SIZE
        assert len(player["name"]) <= 24
    coin = state.get("coin")
    if players:
        assert coin is not None
        assert sum(p["score"] for p in players.values()) == coin["taken"]
        assert (coin["x"], coin["y"]) not in rules.CORNERS
