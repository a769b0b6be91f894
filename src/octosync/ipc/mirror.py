"""Receiver side of the state plane: apply a Snapshot, then gapless Deltas; ask for resync.

Rules (seed § Resync / gap handling, lazily-spec § Reliable Sync):

- a Snapshot replaces everything and sets ``last_epoch``; it is how a mirror (re)starts;
- a Delta with ``base_epoch == last_epoch`` applies; one wholly at or below ``last_epoch`` is a
  re-delivery and is ``Ignored`` (exactly-once effect); any other is a gap: it is discarded and
  the mirror answers with a ``ResyncRequest``;
- a Delta before any Snapshot, an op that breaks the graph (unknown node, duplicate add, ...),
  or a ``state_hash`` that does not match the mirrored state also yield a ``ResyncRequest``;
- a bad Delta or Snapshot changes nothing: ops already applied are rolled back;
- after a ``ResyncRequest`` the mirror is out of sync and ignores Deltas until a Snapshot lands,
  so one gap produces one request (``resync_request()`` re-issues it, e.g. after a timeout).

Op semantics: ``cell_set``/``slot_value`` resolve a node to a payload; ``invalidate`` marks it
dirty and drops its payload; ``node_add`` needs a free id; ``node_remove`` also drops the
node's edges and its root entry; ``edge_add`` needs both ends to exist; ``edge_add`` and
``edge_remove`` have set semantics (adding a present edge or removing an absent one is a no-op,
so a producer may remove edges before or after removing their node). Roots come from the
last Snapshot, minus removed nodes: no op carries a root, which is also why the state hash
leaves roots out.

``values()`` decodes with the type-tag registry. A tag unknown to this process is returned as
its raw bytes (the channel moves bytes; the tag belongs to the producer's language), a blob
reference is returned as the ``BlobRef`` unless the mirror was given a blob reader, which
resolves descriptors (checked) as each message arrives; bytes a known tag cannot decode raise
``TypeTagError`` naming the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from octosync.errors import (
    BlobInvalid,
    Desync,
    EpochGap,
    OctosyncError,
    RemoteProtocolError,
    SnapshotRequired,
    TypeTagError,
    UnknownHandle,
)
from octosync.graph.type_tags import TypeRegistry, default_registry
from octosync.ipc.blobs import has_blobs, inline_blobs
from octosync.ipc.messages import (
    BlobRef,
    CellSet,
    Delta,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    IpcMessage,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    NodeState,
    Payload,
    ResyncRequest,
    SlotValue,
    Snapshot,
)
from octosync.ipc.state_hash import NodeRow, hash_rows


class Applied(msgspec.Struct, frozen=True):
    """The message was applied; the mirror is now at ``epoch``."""

    epoch: int


class Ignored(msgspec.Struct, frozen=True):
    """The message changed nothing, on purpose (``reason`` says why); ``epoch`` is unchanged."""

    epoch: int | None
    reason: str


ApplyResult = Applied | Ignored | ResyncRequest

ALREADY_APPLIED = "already_applied"
AWAITING_SNAPSHOT = "awaiting_snapshot"
NOT_STATE_PLANE = "not_state_plane"

# Undo-log entry kinds.
_VALUE, _ADDED, _REMOVED, _EDGE_ADDED, _EDGE_REMOVED, _OUT_EDGES, _IN_EDGES = range(7)


class _BadOp(Exception):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


class Mirror:
    """A peer's copy of a producer's permission-filtered graph, kept in sync by epochs."""

    def __init__(
        self,
        registry: TypeRegistry = default_registry,
        *,
        blobs: Callable[[BlobRef], bytes] | None = None,
    ) -> None:
        """``blobs``: reads a shared-blob descriptor's checked bytes (``SharedRegion.read``);
        with it, descriptors are resolved as each message arrives, while their region still
        holds them, and one that does not validate is a lost sync (a ``ResyncRequest``)."""
        self._registry = registry
        self._blobs = blobs
        self._tags: dict[int, str] = {}
        self._states: dict[int, NodeState] = {}
        self._payloads: dict[int, Payload | None] = {}
        self._keys: dict[int, str] = {}
        self._deps: dict[int, set[int]] = {}
        """dependent -> its dependencies"""
        self._dependents: dict[int, set[int]] = {}
        """dependency -> its dependents"""
        self._roots: set[int] = set()
        self._last_epoch: int | None = None
        self._awaiting = False
        self.last_error: OctosyncError | None = None
        """Why the last ResyncRequest was issued (EpochGap, Desync, SnapshotRequired, ...)."""

    # --- inspection ---------------------------------------------------------------------------

    @property
    def last_epoch(self) -> int | None:
        return self._last_epoch

    @property
    def in_sync(self) -> bool:
        """A Snapshot was applied and no gap, bad op or hash mismatch has happened since."""
        return self._last_epoch is not None and not self._awaiting

    @property
    def nodes(self) -> tuple[NodeSnapshot, ...]:
        return tuple(
            NodeSnapshot(sid, tag, state, payload, key)
            for sid, tag, state, payload, key in self._rows()
        )

    @property
    def edges(self) -> tuple[Edge, ...]:
        return tuple(Edge(a, b) for a, b in sorted(self._edge_pairs()))

    @property
    def roots(self) -> tuple[int, ...]:
        return tuple(sorted(self._roots))

    def state_hash(self) -> bytes:
        return hash_rows(self._rows(), self._edge_pairs())

    def snapshot(self) -> Snapshot:
        """The mirrored state as a Snapshot at ``last_epoch`` (what a hub serves late joiners)."""
        if self._last_epoch is None:
            raise SnapshotRequired("the mirror has not received a snapshot yet")
        return Snapshot(self._last_epoch, self.nodes, self.edges, self.roots)

    def values(self) -> dict[int, Any]:
        """``{node_id: value}`` of resolved nodes, decoded with the type-tag registry."""
        registry = self._registry
        payloads = self._payloads
        tags = self._tags
        out: dict[int, Any] = {}
        for sid, state in self._states.items():
            if state != "resolved":
                continue
            payload = payloads[sid]
            tag = tags[sid]
            if isinstance(payload, BlobRef) or payload is None or tag not in registry:
                out[sid] = payload
                continue
            try:
                out[sid] = registry.decode(tag, payload)
            except TypeTagError as exc:
                raise TypeTagError(f"node {sid}: {exc.message}", path=f"nodes[{sid}]") from exc
        return out

    def key_of(self, node_id: int) -> str | None:
        """The key of a mirrored node, or None (no such node, or it has no key)."""
        return self._keys.get(node_id)

    def names(self) -> dict[str, int]:
        """``{name: node_id}`` for nodes the producer named (their wire ``key``)."""
        return {key: sid for sid, key in self._keys.items()}

    def write(self, node: int | str, value: Any) -> Delta:
        """A one-op ``cell_set`` of ``value`` on ``node`` (its id or name), encoded with the
        node's type tag, to send to the producer, which may accept or refuse it. Changes
        nothing here: the mirror learns the outcome from the producer's next delta."""
        if self._last_epoch is None:
            raise SnapshotRequired("nothing is mirrored yet: wait for the first state")
        if isinstance(node, str):
            sid = self.names().get(node)
            if sid is None:
                raise UnknownHandle(f"no node is named {node!r}", path="node")
        else:
            sid = node
        tag = self._tags.get(sid)
        if tag is None:
            raise UnknownHandle(f"no node {sid} in the mirrored graph", path="node")
        try:
            payload = self._registry.get(tag).encode(value)
        except TypeTagError as exc:
            raise TypeTagError(f"node {sid}: {exc.message}", path="value") from exc
        return Delta(self._last_epoch, self._last_epoch + 1, (CellSet(sid, payload),))

    def resync_request(self) -> ResyncRequest:
        """The request to (re)send while out of sync."""
        reason = self.last_error.name if self.last_error else SnapshotRequired.name
        return ResyncRequest(last_epoch=self._last_epoch, reason=reason)

    # --- applying -----------------------------------------------------------------------------

    def apply(self, message: IpcMessage) -> ApplyResult:
        if self._blobs is not None and isinstance(message, Snapshot | Delta):
            last = self._last_epoch
            skipped = isinstance(message, Delta) and (
                self._awaiting or (last is not None and message.epoch <= last)
            )
            if not skipped and has_blobs(message):
                try:
                    message = inline_blobs(message, self._blobs)
                except BlobInvalid as err:
                    return self._lost_sync(err)
        if isinstance(message, Delta):
            return self._on_delta(message)
        if isinstance(message, Snapshot):
            return self._on_snapshot(message)
        return Ignored(self._last_epoch, NOT_STATE_PLANE)

    def _lost_sync(self, error: OctosyncError) -> ResyncRequest:
        self._awaiting = True
        self.last_error = error
        return ResyncRequest(last_epoch=self._last_epoch, reason=error.name)

    def _on_delta(self, delta: Delta) -> ApplyResult:
        last = self._last_epoch
        if last is not None and delta.epoch <= last:
            return Ignored(last, ALREADY_APPLIED)
        if self._awaiting:
            return Ignored(last, AWAITING_SNAPSHOT)
        if last is None:
            return self._lost_sync(SnapshotRequired("a delta arrived before any snapshot"))
        if delta.base_epoch != last:
            return self._lost_sync(
                EpochGap(f"delta {delta.base_epoch}->{delta.epoch} does not follow epoch {last}")
            )
        error = self._apply_delta(delta)
        return Applied(delta.epoch) if error is None else self._lost_sync(error)

    def apply_checked(self, message: Snapshot | Delta) -> None:
        """Apply a message that must follow on exactly, or raise why not.

        For a holder that refuses bad input instead of resyncing (the hub): a delta must start
        at ``last_epoch``; a refused message changes nothing and the mirror stays in sync.
        """
        if isinstance(message, Snapshot):
            error = self._load_snapshot(message)
        else:
            last = self._last_epoch
            if last is None:
                raise SnapshotRequired("a delta arrived before any snapshot", path="base_epoch")
            if message.base_epoch != last:
                raise EpochGap(
                    f"delta {message.base_epoch}->{message.epoch} does not follow epoch {last}",
                    path="base_epoch",
                )
            error = self._apply_delta(message)
        if error is not None:
            raise error

    def _apply_delta(self, delta: Delta) -> OctosyncError | None:
        """Apply a delta known to follow on; on a bad op or hash, roll back and say why."""
        undo: list[tuple[Any, ...]] = []
        try:
            self._apply_ops(delta, undo)
        except _BadOp as bad:
            self._rollback(undo)
            return RemoteProtocolError(bad.message, path=f"ops[{bad.index}]")
        if delta.state_hash is not None and delta.state_hash != self.state_hash():
            self._rollback(undo)
            return Desync(f"state hash mismatch after epoch {delta.epoch}", path="state_hash")
        self._last_epoch = delta.epoch
        return None

    def _apply_ops(self, delta: Delta, undo: list[tuple[Any, ...]]) -> None:
        tags = self._tags
        states = self._states
        payloads = self._payloads
        push = undo.append
        for index, op in enumerate(delta.ops):
            # Exact type checks (decoders build exactly these classes): this is the hot loop.
            cls = type(op)
            if cls is CellSet or cls is SlotValue:
                sid = op.slot_id  # type: ignore[union-attr]
                if sid not in tags:
                    raise _BadOp(index, f"{_op_name(op)} on unknown node {sid}")
                push((_VALUE, sid, states[sid], payloads[sid]))
                states[sid] = "resolved"
                payloads[sid] = op.payload  # type: ignore[union-attr]
            elif isinstance(op, Invalidate):
                sid = op.slot_id
                if sid not in tags:
                    raise _BadOp(index, f"invalidate on unknown node {sid}")
                push((_VALUE, sid, states[sid], payloads[sid]))
                states[sid] = "dirty"
                payloads[sid] = None
            elif isinstance(op, EdgeAdd):
                self._edge_add(index, op.dependent, op.dependency, push)
            elif isinstance(op, EdgeRemove):
                self._edge_remove(op.dependent, op.dependency, push)
            elif isinstance(op, NodeAdd):
                self._node_add(index, op, push)
            elif isinstance(op, NodeRemove):
                self._node_remove(index, op.slot_id, push)
            else:
                raise _BadOp(index, f"unknown op {cls.__name__}")

    def _node_add(self, index: int, op: NodeAdd, push: Any) -> None:
        sid = op.slot_id
        if sid in self._tags:
            raise _BadOp(index, f"node_add of node {sid}, which exists (remove it first)")
        state = op.effective_state
        if (state == "resolved") != (op.payload is not None):
            raise _BadOp(index, f"node_add {sid}: payload must be present exactly when resolved")
        self._tags[sid] = op.type_tag
        self._states[sid] = state
        self._payloads[sid] = op.payload
        if op.key is not None:
            self._keys[sid] = op.key
        push((_ADDED, sid))

    def _node_remove(self, index: int, sid: int, push: Any) -> None:
        if sid not in self._tags:
            raise _BadOp(index, f"node_remove of unknown node {sid}")
        # All of the node's edges go at once, one undo entry per direction: O(edges touched).
        out_edges = _detach(self._deps, self._dependents, sid)
        if out_edges:
            push((_OUT_EDGES, sid, out_edges))
        in_edges = _detach(self._dependents, self._deps, sid)
        if in_edges:
            push((_IN_EDGES, sid, in_edges))
        was_root = sid in self._roots
        self._roots.discard(sid)
        push(
            (
                _REMOVED,
                sid,
                self._tags.pop(sid),
                self._states.pop(sid),
                self._payloads.pop(sid),
                self._keys.pop(sid, None),
                was_root,
            )
        )

    def _edge_add(self, index: int, dependent: int, dependency: int, push: Any) -> None:
        if dependent not in self._tags or dependency not in self._tags:
            raise _BadOp(index, f"edge_add {dependent}->{dependency} names an unknown node")
        deps = self._deps.setdefault(dependent, set())
        if dependency in deps:
            return
        deps.add(dependency)
        self._dependents.setdefault(dependency, set()).add(dependent)
        push((_EDGE_ADDED, dependent, dependency))

    def _edge_remove(self, dependent: int, dependency: int, push: Any) -> None:
        deps = self._deps.get(dependent)
        if deps is None or dependency not in deps:
            return
        self._unlink(dependent, dependency)
        push((_EDGE_REMOVED, dependent, dependency))

    def _unlink(self, dependent: int, dependency: int) -> None:
        deps = self._deps[dependent]
        deps.discard(dependency)
        if not deps:
            del self._deps[dependent]
        dependents = self._dependents[dependency]
        dependents.discard(dependent)
        if not dependents:
            del self._dependents[dependency]

    def _rollback(self, undo: list[tuple[Any, ...]]) -> None:
        for entry in reversed(undo):
            kind = entry[0]
            sid = entry[1]
            if kind == _VALUE:
                self._states[sid] = entry[2]
                self._payloads[sid] = entry[3]
            elif kind == _ADDED:
                del self._tags[sid], self._states[sid], self._payloads[sid]
                self._keys.pop(sid, None)
            elif kind == _REMOVED:
                _, _, tag, state, payload, key, was_root = entry
                self._tags[sid] = tag
                self._states[sid] = state
                self._payloads[sid] = payload
                if key is not None:
                    self._keys[sid] = key
                if was_root:
                    self._roots.add(sid)
            elif kind == _EDGE_ADDED:
                self._unlink(sid, entry[2])
            elif kind == _OUT_EDGES:
                for dependency in entry[2]:
                    self._link(sid, dependency)
            elif kind == _IN_EDGES:
                for dependent in entry[2]:
                    self._link(dependent, sid)
            else:
                self._link(sid, entry[2])

    def _link(self, dependent: int, dependency: int) -> None:
        self._deps.setdefault(dependent, set()).add(dependency)
        self._dependents.setdefault(dependency, set()).add(dependent)

    def _on_snapshot(self, snap: Snapshot) -> ApplyResult:
        error = self._load_snapshot(snap)
        return Applied(snap.epoch) if error is None else self._lost_sync(error)

    def _load_snapshot(self, snap: Snapshot) -> OctosyncError | None:
        """Replace the state with ``snap``, or say why it is invalid (and change nothing)."""
        tags: dict[int, str] = {}
        states: dict[int, NodeState] = {}
        payloads: dict[int, Payload | None] = {}
        keys: dict[int, str] = {}
        for i, node in enumerate(snap.nodes):
            sid = node.slot_id
            if sid in tags:
                return RemoteProtocolError(f"node {sid} appears twice", path=f"nodes[{i}]")
            tags[sid] = node.type_tag
            states[sid] = node.state
            payloads[sid] = node.payload
            if node.key is not None:
                keys[sid] = node.key
        deps: dict[int, set[int]] = {}
        dependents: dict[int, set[int]] = {}
        for i, edge in enumerate(snap.edges):
            if edge.dependent not in tags or edge.dependency not in tags:
                return RemoteProtocolError("edge names an unknown node", path=f"edges[{i}]")
            deps.setdefault(edge.dependent, set()).add(edge.dependency)
            dependents.setdefault(edge.dependency, set()).add(edge.dependent)
        for i, root in enumerate(snap.roots):
            if root not in tags:
                return RemoteProtocolError(f"root {root} is not a node", path=f"roots[{i}]")
        if snap.state_hash is not None:
            rows = [(sid, tags[sid], states[sid], payloads[sid], keys.get(sid)) for sid in tags]
            rows.sort(key=_row_id)
            pairs = ((a, b) for a, bs in deps.items() for b in bs)
            if hash_rows(rows, pairs) != snap.state_hash:
                return Desync(f"snapshot hash mismatch at epoch {snap.epoch}", path="state_hash")
        self._tags, self._states, self._payloads, self._keys = tags, states, payloads, keys
        self._deps, self._dependents = deps, dependents
        self._roots = set(snap.roots)
        self._last_epoch = snap.epoch
        self._awaiting = False
        self.last_error = None
        return None

    # --- helpers ------------------------------------------------------------------------------

    def _rows(self) -> list[NodeRow]:
        keys = self._keys
        states = self._states
        payloads = self._payloads
        return [
            (sid, tag, states[sid], payloads[sid], keys.get(sid))
            for sid, tag in sorted(self._tags.items())
        ]

    def _edge_pairs(self) -> list[tuple[int, int]]:
        return [(a, b) for a, bs in self._deps.items() for b in bs]


def _detach(
    forward: dict[int, set[int]], backward: dict[int, set[int]], sid: int
) -> set[int] | None:
    """Remove every edge of ``sid`` in one direction (and the matching back-references)."""
    ends = forward.pop(sid, None)
    if ends:
        for end in ends:
            back = backward[end]
            back.discard(sid)
            if not back:
                del backward[end]
    return ends


def _row_id(row: NodeRow) -> int:
    return row[0]


def _op_name(op: msgspec.Struct) -> str:
    return str(op.__struct_config__.tag)
