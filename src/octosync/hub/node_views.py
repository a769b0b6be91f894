"""Per-node grants on a lazily stream, and the read view they make.

A token may narrow its stream grant to nodes of the producer's graph (lazily-spec's
``RemoteOp`` kinds, each gated on its own)::

    {"nodes": {"game": {"read": ["board/*", "players/*/score"],
                        "write": ["players/alice/*"],
                        "trigger_effect": ["#12"]}}}

A pattern (``fnmatch``, case-sensitive) matches a node's key, or ``#<id>`` for a node without
one (effects have none). A stream with rules denies every node no pattern of the kind matches;
a stream without rules leaves the stream grant whole.

``NodeView`` is one stream's view for the subscribers holding the same rules. It drops what
they may not read before anything is encoded, and keeps the epoch chain whole: a delta whose
every op is hidden is skipped, and the next visible one is relabelled to start where the view's
last frame ended (a multi-epoch span, which receivers apply like any delta). A snapshot served
to one joiner is labelled with the view's last epoch: nothing the view shows changed since.
State hashes cover the whole graph, so a view drops them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from octosync.ipc.messages import (
    CellSet,
    Delta,
    DeltaOp,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    SlotValue,
    Snapshot,
)

NodeKind = Literal["read", "write", "trigger_effect"]
NODE_KINDS: tuple[NodeKind, ...] = ("read", "write", "trigger_effect")
MAX_PATTERNS = 256
"""Patterns per kind and stream in one token: matching costs O(patterns) per node."""


def node_label(node_id: int, key: str | None) -> str:
    """What a pattern is matched against: the key, or ``#<id>`` for a node without one."""
    return key if key is not None else f"#{node_id}"


@dataclass(frozen=True, slots=True)
class NodeRules:
    """Which nodes of one stream a connection may read, write and trigger."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    trigger_effect: tuple[str, ...] = ()

    def allows(self, kind: NodeKind, node_id: int, key: str | None) -> bool:
        label = node_label(node_id, key)
        return any(fnmatchcase(label, p) for p in getattr(self, kind))

    @property
    def view_name(self) -> str:
        """Connections with equal read rules share a view, so its bytes are encoded once."""
        digest = hashlib.blake2s("\0".join(self.read).encode(), digest_size=8).hexdigest()
        return f"nodes:{digest}"


class NodeView:
    """One stream as seen through ``NodeRules.read``; stateful, fed every frame in order."""

    __slots__ = ("_keys", "_last", "_visible", "rules")

    def __init__(self, rules: NodeRules) -> None:
        self.rules = rules
        self._visible: set[int] = set()
        self._keys: dict[int, str | None] = {}
        self._last: int | None = None

    def live(self, body: object) -> object | None:
        """A frame appended to the view's shared log: ``None`` when nothing of it is visible."""
        if isinstance(body, Snapshot):
            self._last = body.epoch
            return self._snapshot(body, body.epoch)
        if isinstance(body, Delta):
            ops = self._ops(body.ops)
            if not ops:
                return None
            base = body.base_epoch if self._last is None else self._last
            self._last = body.epoch
            return Delta(base, body.epoch, ops)
        return body

    def replay(self, body: object) -> object | None:
        """A frame that brings one joiner to where the view's log stands."""
        if isinstance(body, Snapshot):
            if self._last is None:
                self._last = body.epoch
            return self._snapshot(body, self._last)
        return self.live(body)

    def readable(self, node_id: int) -> bool:
        return node_id in self._visible

    def _learn(self, node_id: int, key: str | None) -> bool:
        self._keys[node_id] = key
        if self.rules.allows("read", node_id, key):
            self._visible.add(node_id)
            return True
        self._visible.discard(node_id)
        return False

    def _snapshot(self, snap: Snapshot, epoch: int) -> Snapshot:
        self._visible.clear()
        self._keys.clear()
        nodes = tuple(n for n in snap.nodes if self._learn(n.slot_id, n.key))
        seen = self._visible
        edges = tuple(e for e in snap.edges if e.dependent in seen and e.dependency in seen)
        roots = tuple(r for r in snap.roots if r in seen)
        return Snapshot(epoch, nodes, edges, roots)

    def _ops(self, ops: tuple[DeltaOp, ...]) -> tuple[DeltaOp, ...]:
        seen = self._visible
        out: list[DeltaOp] = []
        for op in ops:
            if isinstance(op, NodeAdd):
                if self._learn(op.slot_id, op.key):
                    out.append(op)
            elif isinstance(op, NodeRemove):
                if op.slot_id in seen:
                    out.append(op)
                seen.discard(op.slot_id)
                self._keys.pop(op.slot_id, None)
            elif isinstance(op, CellSet | SlotValue | Invalidate):
                if op.slot_id in seen:
                    out.append(op)
            elif (
                isinstance(op, EdgeAdd | EdgeRemove)
                and op.dependent in seen
                and op.dependency in seen
            ):
                out.append(op)
        return tuple(out)


__all__ = ["MAX_PATTERNS", "NODE_KINDS", "NodeKind", "NodeRules", "NodeView", "node_label"]
