"""Presence, awareness and expiring values: lazily-spec's presence conformance replayed as data
(each step's live view and whether a reader is invalidated), and TTL properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.presence import ExpiringValue, PeerValues

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "lazily" / "presence"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return doc


@pytest.mark.parametrize("name", ["presence.json", "awareness.json"])
def test_presence_and_awareness_fixtures(name: str) -> None:
    doc = load(name)
    assert doc["model"] in ("PresenceCell", "AwarenessCell")
    cell: PeerValues[Any] = PeerValues(doc["config"]["ttl"])
    for step in doc["steps"]:
        op, want = step["op"], step["expected"]
        if op["type"] in ("heartbeat", "set"):
            changed = cell.set(op["peer"], op["value"], op["now"])
        elif op["type"] == "evict":
            changed = cell.evict(op["peer"])
        else:
            changed = bool(cell.tick(op["now"]))
        present = {str(p): v for p, v in cell.present(op["now"]).items()}
        assert present == want["present"]
        assert changed == want["invalidates"]["present"]


def test_ephemeral_fixture() -> None:
    doc = load("ephemeral.json")
    assert doc["model"] == "EphemeralCell"
    cell: ExpiringValue[Any] = ExpiringValue()
    for step in doc["steps"]:
        op, want = step["op"], step["expected"]
        if op["type"] == "set":
            changed = cell.set(op["value"], op["now"], op["ttl"])
        else:
            changed = cell.tick(op["now"])
        assert cell.value(op["now"]) == want["value"]
        assert changed == want["invalidates"]["value"]


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(0, 5)), max_size=30),
    st.integers(1, 10),
)
def test_a_value_lives_exactly_its_ttl_after_its_last_set(
    sets: list[tuple[int, int, int]], ttl: int
) -> None:
    cell: PeerValues[int] = PeerValues(ttl)
    now = 0
    last: dict[int, tuple[int, int]] = {}
    for peer, value, wait in sets:
        now += wait
        cell.tick(now)
        cell.set(peer, value, now)
        last[peer] = (value, now)
        live = {p: v for p, (v, at) in last.items() if at + ttl > now}
        assert cell.present(now) == live
