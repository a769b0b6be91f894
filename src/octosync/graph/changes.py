"""The change set of one outermost flush: what a publisher needs to build a Delta.

It holds node objects, not ids or payloads, so it costs one list append per change; a
publisher reads ids and the already-encoded payloads from the nodes while the flush is still
running (the values are final then). ``cache`` lets several publishers share the ops built
from one change set, so a flush is turned into wire ops once, not once per peer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from octosync.graph.nodes import ADDED, CLEAN, NO_VALUE, RESOLVED, Node, same_value

if TYPE_CHECKING:
    from octosync.graph.nodes import Cell, Derived


class ChangeSet:
    """Net effect of one flush, in the order a receiver must apply it (see ``ops order``)."""

    __slots__ = (
        "added",
        "cache",
        "cells",
        "edges_added",
        "edges_removed",
        "epoch",
        "invalidated",
        "removed",
        "values",
    )

    def __init__(self) -> None:
        self.epoch = 0
        self.removed: list[Node] = []
        """Nodes that existed before the flush and were disposed (their ids may be reused)."""
        self.added: list[Node] = []
        """Nodes created in the flush and still alive; they carry their current value."""
        self.edges_removed: list[tuple[Node, Node]] = []
        """(dependent, dependency) pairs that existed before and are gone."""
        self.edges_added: list[tuple[Node, Node]] = []
        self.cells: list[Cell[object]] = []
        """Cells whose value differs from the one they had before the flush."""
        self.values: list[Derived[object]] = []
        """Derived nodes now resolved to a value the receiver does not have."""
        self.invalidated: list[Derived[object]] = []
        """Derived nodes resolved before the flush and dirty after it."""
        self.cache: dict[object, object] = {}

    def __bool__(self) -> bool:
        return bool(
            self.cells
            or self.values
            or self.invalidated
            or self.added
            or self.removed
            or self.edges_added
            or self.edges_removed
        )

    def __repr__(self) -> str:
        return (
            f"ChangeSet(epoch={self.epoch}, cells={len(self.cells)}, values={len(self.values)}, "
            f"invalidated={len(self.invalidated)}, added={len(self.added)}, "
            f"removed={len(self.removed)}, edges=+{len(self.edges_added)}"
            f"/-{len(self.edges_removed)})"
        )


def collect(touched: list[Node]) -> ChangeSet:
    """Compare each touched node's recorded pre-flush state with its state now."""
    changes = ChangeSet()
    cells = changes.cells
    for node in touched:
        start = node._start
        if start == ADDED:
            if not node._disposed:
                changes.added.append(node)
                for source in node._sources:
                    changes.edges_added.append((node, source))
            continue
        if node._disposed:
            for source in node._start_sources:
                changes.edges_removed.append((node, source))
            changes.removed.append(node)
            continue
        if not node._derived:
            old = node._start_value
            new = node._value
            if not (old is new or (type(old) is type(new) and old == new)):
                cells.append(node)  # type: ignore[arg-type]
            continue
        if node._sources is not node._start_sources:
            before = node._start_sources
            after = node._sources
            for source in before:
                if source not in after:
                    changes.edges_removed.append((node, source))
            for source in after:
                if source not in before:
                    changes.edges_added.append((node, source))
        if node._state == CLEAN and node._value is not NO_VALUE:
            if start != RESOLVED or not same_value(node._start_value, node._value):
                changes.values.append(node)  # type: ignore[arg-type]
        elif start == RESOLVED:
            changes.invalidated.append(node)  # type: ignore[arg-type]
    return changes
