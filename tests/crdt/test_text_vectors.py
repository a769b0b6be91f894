"""lazily-spec's text CRDT conformance scenarios (``textcrdt_convergence.json``) replayed as
data on shared documents: replicas fork, edit, clone and merge whole states as plane entries.
The two tombstone-collection scenarios need causal-stability GC, which texts do not have yet."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from octosync.crdt.shared import SharedState

NAME = "t"
GC = {
    "gc_collects_stable_leaf_keeps_referenced_tombstone",
    "gc_keeps_a_tombstone_that_is_still_a_left_origin",
}


def scenarios() -> list[dict[str, Any]]:
    path = Path(__file__).parents[1] / "vectors" / "lazily" / "collections"
    data = json.loads((path / "textcrdt_convergence.json").read_text())
    return list(data["scenarios"])


class Runner:
    def __init__(self, seed: Any, replica: dict[str, int] | None) -> None:
        ticks = itertools.count(1)
        self.clock = lambda: next(ticks)
        peer, text = (
            (seed["peer"], seed["text"])
            if isinstance(seed, dict)
            else (
                (replica or {"peer": 1})["peer"],
                seed,
            )
        )
        self.reps = {"a": SharedState(peer, self.clock)}
        self.reps["a"].text_insert(NAME, 0, text)
        self.fresh = itertools.count(100)

    def copy(self, name: str, source: str, peer: int) -> None:
        self.reps[name] = SharedState(peer, self.clock)
        self.reps[name].receive(self.reps[source].replica.ops())

    def text(self, name: str) -> str:
        return str(self.reps[name].read(NAME, "text"))

    def step(self, step: dict[str, Any]) -> None:
        if "fork" in step:
            self.copy(step["fork"], "a", step["peer"])
        elif "clone" in step:
            self.copy(step["clone"], step["from"], next(self.fresh))
        elif "merge" in step:
            into, source = step["merge"]["into"], step["merge"]["from"]
            self.reps[into].receive(self.reps[source].replica.ops())
        else:
            r = self.reps[step.get("on", "a")]
            if step["op"] == "insert":
                r.text_insert(NAME, step["index"], step["ch"])
            else:
                assert step["op"] == "delete", step
                r.text_delete(NAME, step["index"], 1)


@pytest.mark.parametrize(
    "scenario", [s for s in scenarios() if s["id"] not in GC], ids=lambda s: str(s["id"])
)
def test_text_conformance_scenario(scenario: dict[str, Any]) -> None:
    runner = Runner(scenario["seed"], scenario.get("replica"))
    for step in scenario["steps"]:
        runner.step(step)
    expect = scenario["expect"]
    for group in expect.get("texts_equal", ()):
        assert len({runner.text(n) for n in group}) == 1, group
    if "text" in expect:
        assert runner.text("a") == expect["text"]
    if "len" in expect:
        assert len(runner.text("a")) == expect["len"]
    if "a_starts_with" in expect:
        assert runner.text("a").startswith(expect["a_starts_with"])
    if "a_ends_with" in expect:
        assert runner.text("a").endswith(expect["a_ends_with"])


def test_every_scenario_but_tombstone_collection_is_replayed() -> None:
    """The two left out need causal-stability GC, which texts do not have yet (docs/crdt.md
    gives the rule); a new scenario in the file is replayed, not left out."""
    ids = {s["id"] for s in scenarios()}
    assert len(ids) == 7
    assert ids >= GC
