"""Example application: a small multiplayer game, used by the demo, the tests and the benchmark.

Players ``join`` (payload ``{"name": ...}``), ``move`` (``{"dx": int, "dy": int}``, clamped to
the board) and ``score`` (``{"points": int}``). A player that has not joined cannot move or
score; such events are still consumed.

The state also keeps an audit per device: how many of its events were consumed (``n``), which
device sequencers (``ranges``, closed intervals) and how many arrived a second time (``dup``).
A lost or doubled event therefore shows in the state itself, which is what the tests check.

At most ``PER_DEVICE`` events of one device are consumed per call; the rest wait for the next
call, while later events of other devices are consumed: consumption is deliberately not in
chain order, so the chain's out-of-order trim is exercised by every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from octosync.chain.json_tree import JsonTree
from octosync.chain.records import Event, StateChange

BOARD = 50
PER_DEVICE = 8

_decode = msgspec.json.Decoder(dict[str, Any])


def compute(state: JsonTree, events: Sequence[Event]) -> StateChange:
    state = state if isinstance(state, dict) else {}
    players: dict[str, Any] = state.get("players", {})
    audits: dict[str, Any] = state.get("audit", {})
    player_patch: dict[str, Any] = {}
    audit_patch: dict[str, Any] = {}
    taken: dict[str, int] = {}
    kill: list[int] = []
    for event in events:
        device = event.device
        if taken.get(device, 0) >= PER_DEVICE:
            continue
        taken[device] = taken.get(device, 0) + 1
        kill.append(event.chain_sequencer)
        audit = audit_patch.get(device) or _copy_audit(audits.get(device))
        audit_patch[device] = audit
        if _contains(audit["ranges"], event.device_sequencer):
            audit["dup"] += 1
            continue
        audit["n"] += 1
        audit["ranges"] = _insert(audit["ranges"], event.device_sequencer)
        player = player_patch.get(device) or players.get(device)
        changed = _play(player, event)
        if changed is not None:
            player_patch[device] = changed
    change: dict[str, Any] = {}
    if player_patch:
        change["players"] = player_patch
    if audit_patch:
        change["audit"] = audit_patch
    return StateChange(change=change, event_kill=tuple(kill))


def _play(player: dict[str, Any] | None, event: Event) -> dict[str, Any] | None:
    try:
        payload = _decode.decode(event.payload)
    except msgspec.DecodeError:
        return None
    if event.name == "join":
        name = payload.get("name")
        return {"name": name if isinstance(name, str) else "", "x": 0, "y": 0, "score": 0}
    if player is None:
        return None
    if event.name == "move":
        dx, dy = payload.get("dx"), payload.get("dy")
        if not isinstance(dx, int) or not isinstance(dy, int):
            return None
        x = max(-BOARD, min(BOARD, player["x"] + dx))
        y = max(-BOARD, min(BOARD, player["y"] + dy))
        return {**player, "x": x, "y": y}
    if event.name == "score":
        points = payload.get("points")
        if not isinstance(points, int) or isinstance(points, bool):
            return None
        return {**player, "score": player["score"] + points}
    return None


def _copy_audit(audit: dict[str, Any] | None) -> dict[str, Any]:
    if audit is None:
        return {"n": 0, "ranges": [], "dup": 0}
    return {"n": audit["n"], "ranges": [list(r) for r in audit["ranges"]], "dup": audit["dup"]}


def _contains(ranges: list[list[int]], d: int) -> bool:
    return any(lo <= d <= hi for lo, hi in reversed(ranges))


def _insert(ranges: list[list[int]], d: int) -> list[list[int]]:
    """Closed intervals, sorted and merged, with ``d`` added (``d`` not already covered)."""
    if ranges and ranges[-1][1] + 1 == d:
        return [*ranges[:-1], [ranges[-1][0], d]]  # the common case: the next in order
    merged: list[list[int]] = []
    for lo, hi in sorted([*ranges, [d, d]]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def consumed_sequencers(state: JsonTree, device: str) -> set[int]:
    """Every device sequencer of ``device`` the game consumed, from the audit ranges."""
    audit = state.get("audit", {}).get(device) if isinstance(state, dict) else None
    if audit is None:
        return set()
    return {d for lo, hi in audit["ranges"] for d in range(lo, hi + 1)}
