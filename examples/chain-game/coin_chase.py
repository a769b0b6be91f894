"""The game's rules: coin chase on a 9 x 9 board, as the chain's ``compute``.

Every link of the chain runs this same function; the tail calls it with the state and the
events not yet consumed, and the change it returns (an RFC 7386 merge patch) goes to every
player. It must be deterministic (no clock, no randomness): the coin's next square comes from
a hash of how many coins were taken, so any link that takes over computes the same game.

Events: ``join`` (``{"name": str}``) puts a player on a corner; ``move`` (``{"dx": -1|0|1,
"dy": -1|0|1}``) moves one square, kept on the board; a player who steps on the coin scores
a point and the coin jumps. Events of players who did not join, and malformed ones, are
consumed and change nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from octosync.chain.records import Event, StateChange

SIZE = 9
CORNERS = ((0, 0), (SIZE - 1, SIZE - 1), (0, SIZE - 1), (SIZE - 1, 0))
STEPS = (-1, 0, 1)


def coin_square(taken: int) -> dict[str, int]:
    """Where the coin is after ``taken`` coins were picked up (never on a corner)."""
    digest = hashlib.blake2b(f"coin {taken}".encode(), digest_size=2).digest()
    x, y = 1 + digest[0] % (SIZE - 2), 1 + digest[1] % (SIZE - 2)
    return {"x": x, "y": y, "taken": taken}


def compute(state: Any, events: Sequence[Event]) -> StateChange:
    state = state if isinstance(state, dict) else {}
    players: dict[str, Any] = {k: dict(v) for k, v in state.get("players", {}).items()}
    coin: dict[str, int] = dict(state.get("coin") or coin_square(0))
    changed: set[str] = set()
    for event in events:
        payload = _payload(event.payload)
        player = players.get(event.device)
        if event.name == "join" and isinstance(payload.get("name"), str):
            if player is None:
                x, y = CORNERS[len(players) % len(CORNERS)]
                player = {"x": x, "y": y, "score": 0}
            players[event.device] = {**player, "name": payload["name"][:24]}
            changed.add(event.device)
        elif event.name == "move" and player is not None:
            dx, dy = payload.get("dx"), payload.get("dy")
            if type(dx) is not int or type(dy) is not int or dx not in STEPS or dy not in STEPS:
                continue  # JSON true is not a step
            player["x"] = max(0, min(SIZE - 1, player["x"] + dx))
            player["y"] = max(0, min(SIZE - 1, player["y"] + dy))
            if (player["x"], player["y"]) == (coin["x"], coin["y"]):
                player["score"] += 1
                coin = coin_square(coin["taken"] + 1)
            changed.add(event.device)
    patch: dict[str, Any] = {"players": {d: players[d] for d in sorted(changed)}} if changed else {}
    if coin != state.get("coin"):
        patch["coin"] = coin
    return StateChange(change=patch, event_kill=tuple(e.chain_sequencer for e in events))


def _payload(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
