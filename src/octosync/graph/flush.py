"""The flush: what happens when the outermost batch exits.

Eager signals are brought up to date, value-mirror publishers get the dirty nodes they can
read resolved, the net change set is built and handed to every listener (publishers), and
then effects run. Writes made by effects form the next round, which is its own change set.
The context epoch counts rounds whose change set was not empty.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Protocol

from octosync.errors import ComputeError, GraphError
from octosync.graph.changes import ChangeSet, collect
from octosync.graph.nodes import CLEAN, Graph, Node


class FlushedGraph(Graph, Protocol):
    """What the flush uses of a graph beyond what its nodes use (``graph.context.Context``)."""

    epoch: int
    _listeners: list[Callable[[ChangeSet], None]]
    _resolvers: list[Callable[[Node], bool]]
    _resolve_all: bool


MAX_EFFECT_ROUNDS = 100
"""Effects that keep writing are stopped after this many consecutive rounds."""


def run_flush(ctx: FlushedGraph) -> None:
    """Flush until quiet: signals, resolvers, one change set to listeners, then effects."""
    errors: list[BaseException] = []
    rounds = 0
    ctx._depth = 1
    try:
        while ctx._touched or ctx._eager:
            rounds += 1
            if rounds > MAX_EFFECT_ROUNDS:
                raise GraphError(f"effects kept writing for {MAX_EFFECT_ROUNDS} flushes")
            effects = _run_signals(ctx) if ctx._eager else ()
            if ctx._resolvers:
                _run_resolvers(ctx)
            changes = collect(ctx._touched)
            ctx._touched = []
            ctx._gen += 1
            if changes:
                ctx.epoch += 1
                changes.epoch = ctx.epoch
                for listener in tuple(ctx._listeners):
                    listener(changes)
            for effect in effects:
                if not effect._disposed and effect._state != CLEAN:
                    try:
                        effect._update()
                    except Exception as exc:
                        errors.append(exc)
    finally:
        ctx._depth = 0
    if errors:
        first = errors[0]
        if isinstance(first, ComputeError) and len(errors) == 1:
            raise first
        raise ComputeError(f"{len(errors)} effect(s) raised; the first is the cause") from first


def _run_signals(ctx: FlushedGraph) -> list[Node]:
    queue = ctx._eager
    ctx._eager = []
    effects: list[Node] = []
    for node in queue:
        node._queued = False
        if node._disposed:
            continue
        if not node._wire:
            effects.append(node)
        elif node._state != CLEAN:
            with suppress(GraphError):  # held on the node: its readers get the error
                node._update()
    return effects


def _run_resolvers(ctx: FlushedGraph) -> None:
    # A for loop over a list sees items appended while it runs: nodes touched by
    # resolving (sources recomputed on the way) are visited too.
    resolve_all = ctx._resolve_all
    resolvers = ctx._resolvers
    for node in ctx._touched:
        if not node._derived or node._state == CLEAN or node._disposed:
            continue
        if resolve_all or any(wants(node) for wants in resolvers):
            with suppress(GraphError):
                node._update()
