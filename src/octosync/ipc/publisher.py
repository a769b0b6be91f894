"""Publisher: turns a Context's flushes into one peer's Snapshot and Deltas.

Epoch design. The issue asks for three things at once: (1) each Delta has
``epoch == base_epoch + 1`` and a receiver applies it only when ``base_epoch`` is its last
epoch, (2) a peer gets nothing for a flush that changed nothing it can see, and (3) the epoch
is context-wide. With per-peer permissions these cannot all hold literally: if peer A sees
flush 7 and peer B does not, B's next delta cannot be labelled 8/9 and still chain from 6.
A chain the receiver cannot follow loses data, and an empty delta is ruled out by (2), so
(3) gives way, as little as possible:

* ``Context.epoch`` advances once per outermost flush whose change set is non-empty.
* Each publisher keeps its own chain. It starts at the context epoch when created, and
  advances by exactly one for each flush that changed something visible to its peer.
  ``snapshot()`` is taken at the publisher's epoch, so snapshots and deltas always chain.
* A peer that can read every node sees every non-empty flush, so its epochs *are* the
  context's epochs, and all such peers (and publishers with the same view created at the
  same time) share epoch numbers and can share encoded bytes. A restricted view's epoch runs
  at or behind the context epoch, never ahead, so a receiver can still compare them.

Value-mirror mode (the default) asks the context to resolve every dirty node the peer can
read at each flush, so deltas carry ``slot_value``; mirror-lazy mode leaves them dirty and
the delta says ``invalidate``. Ops are built once per change set and shared between
publishers; a restricted publisher only filters them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from octosync.errors import GraphError
from octosync.graph import ChangeSet, Context, Node
from octosync.graph.nodes import CLEAN, NO_VALUE
from octosync.graph.type_tags import TypeRegistry
from octosync.ipc.messages import (
    CellSet,
    Delta,
    DeltaOp,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    NodeState,
    SlotValue,
    Snapshot,
)
from octosync.ipc.permissions import PeerPermissions, apply_remote_writes
from octosync.ipc.state_hash import state_hash

Mode = Literal["value", "lazy"]
MODES: tuple[Mode, ...] = ("value", "lazy")

DEFAULT_MAX_PENDING = 65_536
"""Undrained deltas kept per publisher; past this the peer is reset to a fresh snapshot."""


class Publisher:
    """One peer's view of a Context: ``snapshot()`` once, then ``drain()`` after flushes."""

    def __init__(
        self,
        ctx: Context,
        permissions: PeerPermissions | None = None,
        mode: Mode = "value",
        registry: TypeRegistry | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        hash_state: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.ctx = ctx
        self.permissions = permissions if permissions is not None else PeerPermissions()
        self.mode: Mode = mode
        self.registry = registry or ctx.registry
        self.max_pending = max_pending
        self.hash_state = hash_state
        """Put the BLAKE3 state hash of the view on every snapshot and delta (costs O(view))."""
        self.lagged = False
        """Set when undrained deltas overflowed and were dropped: send ``snapshot()`` next."""
        self._epoch = ctx.epoch
        self._pending: list[Delta] = []
        self._cache_key = ("ops", id(self.registry))
        self._closers = [ctx.subscribe(self._on_changes)]
        if mode == "value":
            perms = self.permissions
            self._closers.append(
                ctx.add_resolver(None if perms.is_all else lambda n: perms.can_read(n.id))
            )

    @property
    def epoch(self) -> int:
        """The epoch of this peer's view (see the module docstring)."""
        return self._epoch

    def close(self) -> None:
        """Stop following the context."""
        for close in self._closers:
            close()
        self._closers = []

    # --- outbound ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Everything the peer may read, at this publisher's current epoch."""
        ctx = self.ctx
        if ctx.in_batch:
            # Unflushed changes would be in the snapshot and again in the next delta.
            raise GraphError("snapshot() inside a batch or flush: take it after the flush")
        if self.mode == "value":
            can_read = self.permissions.can_read
            stale = [n for n in ctx.nodes() if n._derived and n._state != CLEAN and can_read(n.id)]
            if stale:
                ctx.resolve(stale)  # a flush of its own: it may advance our epoch first
        nodes, edges, roots = self.view()
        self.lagged = False
        return Snapshot(
            epoch=self._epoch,
            nodes=nodes,
            edges=edges,
            roots=roots,
            state_hash=state_hash(nodes, edges) if self.hash_state else None,
        )

    def view(self) -> tuple[tuple[NodeSnapshot, ...], tuple[Edge, ...], tuple[int, ...]]:
        """The peer's view as it stands (nodes, edges, roots), resolving nothing."""
        can_read = self.permissions.can_read
        nodes: list[NodeSnapshot] = []
        edges: list[Edge] = []
        roots: list[int] = []
        for node in self.ctx.nodes():
            if not node._wire or not can_read(node.id):
                continue
            state = node_state(node)
            nodes.append(
                NodeSnapshot(
                    slot_id=node.id,
                    type_tag=node._type_tag or "",
                    state=state,
                    payload=self._payload(node) if state == "resolved" else None,
                    key=node._name,
                )
            )
            if not node._derived:
                roots.append(node.id)
            for source in node._sources:
                if can_read(source.id):
                    edges.append(Edge(dependent=node.id, dependency=source.id))
        return tuple(nodes), tuple(edges), tuple(roots)

    def drain(self) -> list[Delta]:
        """The deltas of the flushes since the last drain, oldest first."""
        pending = self._pending
        self._pending = []
        return pending

    # --- inbound -----------------------------------------------------------------------------

    def apply_remote(self, ops: DeltaOp | Sequence[DeltaOp]) -> None:
        """Apply a peer's writes (``cell_set`` on writable cells only) as one batch."""
        batch: Sequence[DeltaOp] = ops if isinstance(ops, Sequence) else [ops]
        apply_remote_writes(self.ctx, self.permissions, batch)

    # --- internals ---------------------------------------------------------------------------

    def _payload(self, node: Node) -> bytes:
        if self.registry is self.ctx.registry:
            assert node._payload is not None
            return node._payload
        assert node._type_tag is not None
        return self.registry.encode(node._type_tag, node._value)

    def _on_changes(self, changes: ChangeSet) -> None:
        built = changes.cache.get(self._cache_key)
        if built is None:
            built = changes.cache[self._cache_key] = _build_ops(
                changes, self._payload, self.registry is self.ctx.registry
            )
        ops: tuple[DeltaOp, ...] = built  # type: ignore[assignment]
        if not self.permissions.is_all:
            can_read = self.permissions.can_read
            ops = tuple(op for op in ops if _visible(op, can_read))
        if not ops:
            return
        epoch = self._epoch
        self._epoch = epoch + 1
        if len(self._pending) >= self.max_pending:
            self._pending.clear()
            self.lagged = True
        digest = state_hash(*self.view()[:2]) if self.hash_state else None
        self._pending.append(Delta(base_epoch=epoch, epoch=epoch + 1, ops=ops, state_hash=digest))


def node_state(node: Node) -> NodeState:
    """How a snapshot describes a node: resolved (has its current value), dirty or unset."""
    if node._state == CLEAN and node._value is not NO_VALUE:
        return "resolved"
    return "unset" if node._value is NO_VALUE else "dirty"


def _visible(op: DeltaOp, can_read: Callable[[int], bool]) -> bool:
    if type(op) is EdgeAdd or type(op) is EdgeRemove:
        return can_read(op.dependent) and can_read(op.dependency)
    return can_read(op.slot_id)  # type: ignore[union-attr]


def _build_ops(
    changes: ChangeSet, payload: Callable[[Node], bytes], shared: bool
) -> tuple[DeltaOp, ...]:
    """All ops of a change set in the order a receiver applies them.

    Removals before additions, so a reused id reads as remove-then-add; edges after the nodes
    they join exist and before those nodes go; values last.
    """
    ops: list[DeltaOp] = []
    if changes.removed or changes.added or changes.edges_removed or changes.edges_added:
        ops.extend([EdgeRemove(a.id, b.id) for a, b in changes.edges_removed])
        ops.extend([NodeRemove(n.id) for n in changes.removed])
        for node in changes.added:
            state = node_state(node)
            if state == "resolved":
                ops.append(NodeAdd(node.id, node._type_tag or "", payload(node), node._name))
            else:
                ops.append(NodeAdd(node.id, node._type_tag or "", None, node._name, state))
        ops.extend([EdgeAdd(a.id, b.id) for a, b in changes.edges_added])
    if shared:  # the context's own encoding: read the cached payloads directly
        ops.extend([CellSet(c.id, c._payload) for c in changes.cells])  # type: ignore[arg-type]
        if changes.values:
            ops.extend([SlotValue(n.id, n._payload) for n in changes.values])  # type: ignore[arg-type]
    else:
        ops.extend([CellSet(c.id, payload(c)) for c in changes.cells])
        ops.extend([SlotValue(n.id, payload(n)) for n in changes.values])
    if changes.invalidated:
        ops.extend([Invalidate(n.id) for n in changes.invalidated])
    return tuple(ops)
