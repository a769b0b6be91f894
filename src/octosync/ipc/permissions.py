"""Per-peer permissions: default deny; read, write and trigger_effect granted independently.

Grants are per NodeId, so a reused id inherits the grants of the id, not of the old node;
a caller that reuses ids for unrelated data should revoke first. A publisher assumes its
peer's permissions stay fixed while it runs: after changing them, send a fresh snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from octosync.errors import DecodeError, Forbidden, GraphError, TypeTagError
from octosync.graph import Cell, Context, Effect
from octosync.ipc.messages import CellSet, DeltaOp

Kind = Literal["read", "write", "trigger_effect"]
KINDS: tuple[Kind, ...] = ("read", "write", "trigger_effect")


class PeerPermissions:
    """What one peer may read, write and trigger. Nothing is granted unless said so."""

    __slots__ = ("_all", "_grants")

    def __init__(
        self,
        read: Iterable[int] = (),
        write: Iterable[int] = (),
        trigger_effect: Iterable[int] = (),
    ) -> None:
        self._all = False
        self._grants: dict[Kind, set[int]] = {
            "read": set(read),
            "write": set(write),
            "trigger_effect": set(trigger_effect),
        }

    @classmethod
    def allow_all(cls) -> PeerPermissions:
        """Every kind on every node, present and future (a trusted local peer)."""
        perms = cls()
        perms._all = True
        return perms

    @property
    def is_all(self) -> bool:
        return self._all

    def grant(self, kind: Kind, *node_ids: int) -> None:
        self._grants[_kind(kind)].update(node_ids)

    def revoke(self, kind: Kind, *node_ids: int) -> None:
        self._grants[_kind(kind)].difference_update(node_ids)

    def allows(self, kind: Kind, node_id: int) -> bool:
        return self._all or node_id in self._grants[_kind(kind)]

    def can_read(self, node_id: int) -> bool:
        return self._all or node_id in self._grants["read"]

    def can_write(self, node_id: int) -> bool:
        return self._all or node_id in self._grants["write"]

    def can_trigger(self, node_id: int) -> bool:
        return self._all or node_id in self._grants["trigger_effect"]

    def readable(self) -> frozenset[int] | None:
        """The readable ids, or None when every node is readable."""
        return None if self._all else frozenset(self._grants["read"])

    def filter_readable(self, node_ids: Iterable[int]) -> list[int]:
        """Drop ids the peer may not read, keeping order (before anything is serialised)."""
        return [n for n in node_ids if self.can_read(n)]

    def __repr__(self) -> str:
        if self._all:
            return "PeerPermissions.allow_all()"
        parts = ", ".join(f"{k}={sorted(v)}" for k, v in self._grants.items() if v)
        return f"PeerPermissions({parts})"


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise ValueError(f"unknown permission kind {kind!r}; expected one of {KINDS}")
    return kind


def check_remote_write(
    ctx: Context, permissions: PeerPermissions, op: DeltaOp, path: str = "op"
) -> tuple[Cell[object], object]:
    """Validate one inbound op without applying it: the cell to write and the decoded value.

    Only ``cell_set`` on an existing cell the peer may write is accepted; everything else is
    ``Forbidden``. Unknown ids are refused the same way, so a peer cannot probe which exist.
    """
    if not isinstance(op, CellSet):
        raise Forbidden(f"peers may only send cell_set, not {type(op).__name__}", path=path)
    node_id = op.slot_id
    if not permissions.can_write(node_id):
        raise Forbidden(f"no write permission on node {node_id}", path=f"{path}.slot_id")
    try:
        node = ctx.node(node_id)
    except GraphError:
        raise Forbidden(f"no writable cell {node_id}", path=f"{path}.slot_id") from None
    if not isinstance(node, Cell):
        raise Forbidden(f"node {node_id} is a {node.kind}, not a cell", path=f"{path}.slot_id")
    if not isinstance(op.payload, bytes):
        raise Forbidden("remote writes must carry inline payload bytes", path=f"{path}.payload")
    assert node.type_tag is not None
    try:
        value = ctx.registry.decode(node.type_tag, op.payload)
    except TypeTagError as exc:
        raise DecodeError(
            f"payload is not a valid {node.type_tag}: {exc}", path=f"{path}.payload"
        ) from exc
    return node, value


def apply_remote_writes(ctx: Context, permissions: PeerPermissions, ops: Sequence[DeltaOp]) -> None:
    """Apply a peer's writes as one batch, or none of them if any is refused."""
    checked = [check_remote_write(ctx, permissions, op, f"ops[{i}]") for i, op in enumerate(ops)]
    with ctx.batch():
        for cell, value in checked:
            cell.set(value)


def apply_remote_write(ctx: Context, permissions: PeerPermissions, op: DeltaOp) -> None:
    """Apply one inbound op from a peer (its own batch); ``Forbidden`` changes nothing."""
    cell, value = check_remote_write(ctx, permissions, op)
    cell.set(value)


def trigger_remote_effect(ctx: Context, permissions: PeerPermissions, node_id: int) -> None:
    """Run an effect on a peer's request, if the peer holds ``trigger_effect`` on it."""
    if not permissions.can_trigger(node_id):
        raise Forbidden(f"no trigger_effect permission on node {node_id}", path="node")
    try:
        node = ctx.node(node_id)
    except GraphError:
        raise Forbidden(f"no effect {node_id}", path="node") from None
    if not isinstance(node, Effect):
        raise Forbidden(f"node {node_id} is a {node.kind}, not an effect", path="node")
    node.run()
