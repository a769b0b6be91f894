"""The hub's own mirror of a stream, so late joiners and resyncs never involve the producer.

Two kinds of stream:

- ``GraphModel`` for the lazily state plane: the hub understands the ops, applies them and can
  build a fresh, compact Snapshot at the current epoch (and check state hashes against it).
- ``ReplayModel`` for frames whose ops the hub cannot apply (WVP graphs are the producer's):
  it keeps the latest snapshot plus the diffs since, bounded, and replays both.

Both validate a frame completely before changing anything, so a rejected frame changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from octosync.errors import DecodeError, Desync, EpochGap, SnapshotRequired
from octosync.ipc.messages import (
    CellSet,
    Delta,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    SlotValue,
    Snapshot,
)
from octosync.ipc.state_hash import snapshot_hash

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class SnapshotFrame(Generic[P]):
    """A full-state reset at ``epoch``; ``body`` is the face's message (opaque to the hub)."""

    epoch: int
    body: P
    state_hash: bytes | None = None


@dataclass(frozen=True, slots=True)
class DiffFrame(Generic[P]):
    """A change from ``from_epoch`` to ``to_epoch`` (``from_epoch + 1`` on WVP streams; a
    lazily delta may span several epochs)."""

    from_epoch: int
    to_epoch: int
    body: P
    state_hash: bytes | None = None


Frame = SnapshotFrame[P] | DiffFrame[P]

StateHasher = Callable[[Snapshot], bytes]


default_state_hash: StateHasher = snapshot_hash
"""The state plane's own hash (BLAKE3 over nodes and edges), so producers and hub agree."""


def check_contiguous(
    last_epoch: int | None, frame: DiffFrame[P], *, multi_epoch: bool = False
) -> None:
    """The gapless rule: ``from == last``, and ``to == from + 1`` (WVP) or, with
    ``multi_epoch`` (lazily-spec's multi-epoch-span deltas), ``to > from``."""
    if last_epoch is None:
        raise SnapshotRequired("a diff arrived before any snapshot for this stream")
    if frame.from_epoch != last_epoch:
        raise EpochGap(
            f"diff {frame.from_epoch}->{frame.to_epoch} is not contiguous with epoch {last_epoch}",
            path="from_epoch",
        )
    if frame.to_epoch <= frame.from_epoch if multi_epoch else frame.to_epoch != last_epoch + 1:
        raise EpochGap(
            f"diff {frame.from_epoch}->{frame.to_epoch} must advance "
            + ("the epoch" if multi_epoch else "by exactly one epoch"),
            path="to_epoch",
        )


@dataclass(slots=True)
class GraphModel:
    """Applies lazily Snapshot/Delta messages to an in-memory copy of the producer's graph."""

    hasher: StateHasher = default_state_hash
    epoch: int | None = None
    nodes: dict[int, NodeSnapshot] = field(default_factory=dict)
    edges: set[tuple[int, int]] = field(default_factory=set)
    roots: list[int] = field(default_factory=list)
    _cached: Snapshot | None = None

    def reset(self, frame: SnapshotFrame[Snapshot]) -> None:
        snap = frame.body
        if not isinstance(snap, Snapshot):
            raise DecodeError("a graph stream only carries lazily snapshots", path="body")
        if frame.state_hash is not None and self.hasher(snap) != frame.state_hash:
            raise Desync("snapshot state_hash does not match its own content", path="state_hash")
        self.epoch = snap.epoch
        self.nodes = {n.slot_id: n for n in snap.nodes}
        self.edges = {(e.dependent, e.dependency) for e in snap.edges}
        self.roots = list(snap.roots)
        self._cached = snap

    def apply(self, frame: DiffFrame[Delta]) -> None:
        check_contiguous(self.epoch, frame, multi_epoch=True)
        delta = frame.body
        if not isinstance(delta, Delta):
            raise DecodeError("a graph stream only carries lazily deltas", path="body")
        # Overlay first, commit after every check passed: a rejected delta changes nothing and
        # an accepted one costs O(ops), not O(graph).
        changed: dict[int, NodeSnapshot | None] = {}
        edge_changes: dict[tuple[int, int], bool] = {}  # in op order: True added, False gone
        removed: set[int] = set()

        def current(sid: int) -> NodeSnapshot | None:
            return changed[sid] if sid in changed else self.nodes.get(sid)

        for i, op in enumerate(delta.ops):
            path = f"ops[{i}]"
            match op:
                case CellSet(slot_id=sid, payload=p) | SlotValue(slot_id=sid, payload=p):
                    old = current(sid)
                    if old is None:
                        raise DecodeError(f"{type(op).__name__} on unknown node {sid}", path=path)
                    changed[sid] = NodeSnapshot(sid, old.type_tag, "resolved", p, old.key)
                case Invalidate(slot_id=sid):
                    old = current(sid)
                    if old is None:
                        raise DecodeError(f"invalidate on unknown node {sid}", path=path)
                    changed[sid] = NodeSnapshot(sid, old.type_tag, "dirty", None, old.key)
                case NodeAdd():
                    changed[op.slot_id] = NodeSnapshot(
                        op.slot_id, op.type_tag, op.effective_state, op.payload, op.key
                    )
                case NodeRemove(slot_id=sid):
                    if current(sid) is None:
                        raise DecodeError(f"node_remove of unknown node {sid}", path=path)
                    changed[sid] = None
                    removed.add(sid)
                    # A removed node takes its edges with it (rare: a scan is fine here).
                    for edge in [*self.edges, *edge_changes]:
                        if sid in edge:
                            edge_changes[edge] = False
                case EdgeAdd(dependent=a, dependency=b):
                    edge_changes[(a, b)] = True
                case EdgeRemove(dependent=a, dependency=b):
                    edge_changes[(a, b)] = False
        nodes, edges, roots = self.nodes, self.edges, self.roots
        if frame.state_hash is not None:
            nodes, edges, roots = dict(nodes), set(edges), list(roots)
        if removed:
            roots = [r for r in roots if r not in removed]
        for sid, node in changed.items():
            if node is None:
                nodes.pop(sid, None)
            else:
                nodes[sid] = node
        for edge, present in edge_changes.items():
            if present:
                edges.add(edge)
            else:
                edges.discard(edge)
        if frame.state_hash is not None:
            candidate = Snapshot(
                epoch=frame.to_epoch,
                nodes=tuple(nodes.values()),
                edges=tuple(Edge(a, b) for a, b in edges),
                roots=tuple(roots),
            )
            if self.hasher(candidate) != frame.state_hash:
                raise Desync(
                    f"state_hash after epoch {frame.to_epoch} does not match the hub's mirror",
                    path="state_hash",
                )
        self.nodes, self.edges, self.roots = nodes, edges, roots
        self.epoch = frame.to_epoch
        self._cached = None

    def snapshot(self) -> Snapshot | None:
        """The current state as one Snapshot (cached until the next change)."""
        if self.epoch is None:
            return None
        if self._cached is None:
            self._cached = Snapshot(
                epoch=self.epoch,
                nodes=tuple(sorted(self.nodes.values(), key=lambda n: n.slot_id)),
                edges=tuple(Edge(a, b) for a, b in sorted(self.edges)),
                roots=tuple(self.roots),
            )
        return self._cached

    def replay(self) -> list[Frame[object]]:
        snap = self.snapshot()
        return [] if snap is None else [SnapshotFrame(snap.epoch, snap)]


@dataclass(slots=True)
class ReplayModel:
    """Latest snapshot plus the diffs since it, for ops the hub cannot apply.

    When more than ``max_diffs`` diffs pile up the log can no longer rebuild the state, so it
    is marked stale: live subscribers keep receiving diffs, new ones wait for the next snapshot
    (``wants_snapshot`` tells the hub to ask the producer for one).
    """

    max_diffs: int = 1024
    epoch: int | None = None
    base: SnapshotFrame[object] | None = None
    diffs: list[DiffFrame[object]] = field(default_factory=list)
    stale: bool = False

    def reset(self, frame: SnapshotFrame[object]) -> None:
        self.epoch = frame.epoch
        self.base = frame
        self.diffs = []
        self.stale = False

    def apply(self, frame: DiffFrame[object]) -> None:
        check_contiguous(self.epoch, frame)
        self.epoch = frame.to_epoch
        if self.stale:
            return
        if len(self.diffs) >= self.max_diffs:
            self.diffs = []
            self.stale = True
            return
        self.diffs.append(frame)

    @property
    def wants_snapshot(self) -> bool:
        return self.stale

    def replay(self) -> list[Frame[object]]:
        if self.base is None or self.stale:
            return []
        return [self.base, *self.diffs]


def lazily_frame(msg: Snapshot | Delta) -> Frame[object]:
    """The hub frame for a lazily state-plane message (any dialect decodes to these)."""
    if isinstance(msg, Snapshot):
        return SnapshotFrame(msg.epoch, msg, msg.state_hash)
    return DiffFrame(msg.base_epoch, msg.epoch, msg, msg.state_hash)
