"""A chain's computed state as cells of a reactive ``Context``, so the hub can serve it.

Layout: **one JSON cell per top-level key** of the state, named by the key, plus a cell
``$sequencer`` holding the chain's state sequencer. Why not one cell holding the whole state:
a delta then carries only the top-level keys whose value changed (an equal value sets nothing),
subscribers read the keys by name (``State.by_name["players"]``), and the state sequencer lets
an observer line up what it sees with the chain (``octosync chain status``).

A state that is not an object, or that has a key that cannot be a node name (empty, with a
``/``, starting with ``$``, or longer than a node key may be), is held whole in one cell named
``$state`` instead; the layout follows each state, so a later state may switch back.

Every state is applied in one batch: one flush, hence one delta, per state the chain computed,
whatever the number of keys that changed. Sans-I/O: the caller feeds states in the order the
chain applied them (``apply``) and streams the ``Context`` (``octosync.client``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from octosync.bounds import NODE_KEY_MAX
from octosync.chain.json_tree import JsonTree
from octosync.graph import Cell, Context

SEQUENCER: Final = "$sequencer"
WHOLE: Final = "$state"
_NAMEABLE = re.compile(r"[^/$][^/]*")


def nameable(key: str) -> bool:
    """``key`` can name its own cell (and cannot collide with ``$sequencer`` or ``$state``)."""
    return len(key) <= NODE_KEY_MAX and _NAMEABLE.fullmatch(key) is not None


def layout(state: JsonTree, sequencer: int) -> dict[str, Any]:
    """The cells (name to JSON value) that hold ``state`` at ``sequencer``."""
    cells: dict[str, Any]
    if isinstance(state, dict) and all(nameable(k) for k in state):
        cells = dict(state)
    else:
        cells = {WHOLE: state}
    cells[SEQUENCER] = sequencer
    return cells


def state_of(by_name: Mapping[str, Any]) -> tuple[JsonTree, int | None]:
    """The inverse of ``layout``: the state and sequencer an observer's cells hold."""
    sequencer = by_name.get(SEQUENCER)
    if WHOLE in by_name:
        return by_name[WHOLE], sequencer
    return {k: v for k, v in by_name.items() if k != SEQUENCER}, sequencer


class StateCells:
    """Keeps ``ctx``'s cells equal to the last state applied."""

    def __init__(self, ctx: Context | None = None) -> None:
        self.ctx = ctx or Context()
        self._cells: dict[str, Cell[Any]] = {}
        self.sequencer: int | None = None

    def apply(self, state: JsonTree, sequencer: int) -> None:
        """Show ``state`` (the chain's state after ``sequencer``); one flush at most."""
        wanted = layout(state, sequencer)
        with self.ctx.batch():
            for name in [n for n in self._cells if n not in wanted]:
                self._cells.pop(name).dispose()
            for name, value in wanted.items():
                cell = self._cells.get(name)
                if cell is None:
                    self._cells[name] = self.ctx.cell(value, "json", name=name)
                else:
                    cell.set(value)
        self.sequencer = sequencer

    def names(self) -> list[str]:
        return sorted(self._cells)
