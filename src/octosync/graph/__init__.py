"""Reactive graph: cells, lazy memos, eager signals, effects, batches and change sets."""

from octosync.graph.changes import ChangeSet
from octosync.graph.context import Context
from octosync.graph.nodes import Cell, Derived, Effect, Memo, Node, Signal

__all__ = ["Cell", "ChangeSet", "Context", "Derived", "Effect", "Memo", "Node", "Signal"]
