"""The hub's own mirror of a stream, so late joiners and resyncs never involve the producer.

Two kinds of stream:

- ``GraphModel`` for the lazily state plane: the hub applies the ops with the state plane's own
  ``Mirror`` and can build a fresh, compact Snapshot at the current epoch (and check state
  hashes against it).
- ``ReplayModel`` for frames whose ops the hub cannot apply (WVP graphs are the producer's):
  it keeps the latest snapshot plus the diffs since, bounded, and replays both.

Both validate a frame completely before changing anything, so a rejected frame changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from octosync.errors import DecodeError, EpochGap, SnapshotRequired
from octosync.ipc.messages import Delta, Snapshot
from octosync.ipc.mirror import Mirror
from octosync.warp.frames import WarpDiff, WarpSnapshot

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Sent:
    """The bytes a producer sent for a frame and the dialect they are in, kept so the journal
    stores them as they came (no second encode). The hub itself never reads them."""

    codec: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SnapshotFrame(Generic[P]):
    """A full-state reset at ``epoch``; ``body`` is the face's message (opaque to the hub)."""

    epoch: int
    body: P
    state_hash: bytes | None = None
    sent: Sent | None = None


@dataclass(frozen=True, slots=True)
class DiffFrame(Generic[P]):
    """A change from ``from_epoch`` to ``to_epoch`` (``from_epoch + 1`` on WVP streams; a
    lazily delta may span several epochs)."""

    from_epoch: int
    to_epoch: int
    body: P
    state_hash: bytes | None = None
    sent: Sent | None = None


Frame = SnapshotFrame[P] | DiffFrame[P]

Body = Snapshot | Delta | WarpSnapshot | WarpDiff
"""What a hub frame carries: a lazily stream's message (the hub applies it) or a WVP warp's
frame (the producer's graph and ops, which the hub relays and may check)."""


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


class GraphModel:
    """The hub's copy of a lazily producer's graph: the state plane's own ``Mirror``.

    One rule set for both ends: the hub accepts exactly the frames a subscriber's mirror
    accepts, and refuses (rather than resyncs on) the rest, unchanged. A delta costs O(ops and
    edges touched); the snapshot for late joiners is built once per change.
    """

    __slots__ = ("_cached", "_mirror")

    def __init__(self) -> None:
        self._mirror = Mirror()
        self._cached: Snapshot | None = None

    @property
    def epoch(self) -> int | None:
        return self._mirror.last_epoch

    def reset(self, frame: SnapshotFrame[Body]) -> None:
        """A lazily snapshot (any other body is refused: the check is the type's narrowing)."""
        snap = frame.body
        if not isinstance(snap, Snapshot):
            raise DecodeError("a graph stream only carries lazily snapshots", path="body")
        self._mirror.apply_checked(snap)
        self._cached = snap

    def apply(self, frame: DiffFrame[Body]) -> None:
        """A lazily delta (any other body is refused)."""
        delta = frame.body
        if not isinstance(delta, Delta):
            raise DecodeError("a graph stream only carries lazily deltas", path="body")
        check_contiguous(self.epoch, frame, multi_epoch=True)
        self._mirror.apply_checked(delta)
        self._cached = None

    def key_of(self, node_id: int) -> str | None:
        """The node's key, if the producer gave it one."""
        return self._mirror.key_of(node_id)

    def snapshot(self) -> Snapshot | None:
        """The current state as one Snapshot (cached until the next change)."""
        if self.epoch is None:
            return None
        if self._cached is None:
            self._cached = self._mirror.snapshot()
        return self._cached

    def replay(self) -> list[Frame[Body]]:
        snap = self.snapshot()
        return [] if snap is None else [SnapshotFrame(snap.epoch, snap)]


@dataclass(slots=True)
class ReplayModel(Generic[P]):
    """Latest snapshot plus the diffs since it, for ops the hub cannot apply (``P``: the
    frames' body, a WVP frame in the hub, its journal record in recovery).

    When more than ``max_diffs`` diffs pile up the log can no longer rebuild the state, so it
    is marked stale: live subscribers keep receiving diffs, new ones wait for the next snapshot
    (``wants_snapshot`` tells the hub to ask the producer for one).
    """

    max_diffs: int = 1024
    epoch: int | None = None
    base: SnapshotFrame[P] | None = None
    diffs: list[DiffFrame[P]] = field(default_factory=list)
    stale: bool = False

    def reset(self, frame: SnapshotFrame[P]) -> None:
        self.epoch = frame.epoch
        self.base = frame
        self.diffs = []
        self.stale = False

    def apply(self, frame: DiffFrame[P]) -> None:
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

    def replay(self) -> list[Frame[P]]:
        if self.base is None or self.stale:
            return []
        return [self.base, *self.diffs]


def lazily_frame(msg: Snapshot | Delta, sent: Sent | None = None) -> Frame[Body]:
    """The hub frame for a lazily state-plane message (any dialect decodes to these);
    ``sent``: the producer's own bytes of it, for the journal."""
    if isinstance(msg, Snapshot):
        return SnapshotFrame(msg.epoch, msg, msg.state_hash, sent)
    return DiffFrame(msg.base_epoch, msg.epoch, msg, msg.state_hash, sent)
