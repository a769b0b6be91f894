"""WVP's consumer algorithm for one ``WarpId``, and the producer's half that makes the frames.

A consumer starts **idle** (no epoch). A snapshot replaces its graph and sets the epoch; a
diff ``e -> e+1`` applies its ops and advances it. When a frame names a ``state_hash`` the
consumer checks it against its own graph. A gap (``EpochGap``), a diff before any snapshot
(``SnapshotRequired``), ops that do not fit the graph or a hash that does not match
(``Desync``) leave the consumer **desynced**: the error is raised once, the graph is kept as
it was before the frame, and every later diff is ignored until the next snapshot, which is
what the resync request the client sends in reply brings. Sans-I/O: frames in, states out.
"""

from __future__ import annotations

from enum import Enum

from octosync.errors import Desync, EpochGap, ProtocolError, SnapshotRequired
from octosync.warp.frames import WarpDiff, WarpSnapshot
from octosync.warp.graph import RenderGraph


class Phase(Enum):
    IDLE = "idle"
    LIVE = "live"
    DESYNCED = "desynced"


class WarpConsumer:
    """The per-``WarpId`` state machine of the WVP consumer algorithm."""

    __slots__ = ("epoch", "graph", "last_error", "phase", "verified", "warp_id")

    def __init__(self, warp_id: int) -> None:
        self.warp_id = warp_id
        self.phase = Phase.IDLE
        self.epoch: int | None = None
        self.graph = RenderGraph()
        self.verified = 0
        """Frames whose ``state_hash`` was checked and matched."""
        self.last_error: ProtocolError | None = None

    def apply(self, frame: WarpSnapshot | WarpDiff) -> bool:
        """Apply one frame; False when it was ignored (a diff while desynced).

        Raises the typed error once, on the frame that broke the stream."""
        try:
            if isinstance(frame, WarpSnapshot):
                self._snapshot(frame)
                return True
            if self.phase is Phase.DESYNCED:
                return False
            self._diff(frame)
            return True
        except ProtocolError as err:
            self.phase = Phase.DESYNCED
            self.last_error = err
            raise

    def _snapshot(self, frame: WarpSnapshot) -> None:
        graph = RenderGraph.from_plain(frame.graph)
        self._check(graph, frame.state_hash, frame.epoch)
        self.graph = graph
        self.epoch = frame.epoch
        self.phase = Phase.LIVE

    def _diff(self, frame: WarpDiff) -> None:
        if self.epoch is None:
            raise SnapshotRequired(f"warp {self.warp_id}: a diff before any snapshot")
        if frame.from_epoch != self.epoch or frame.to_epoch != frame.from_epoch + 1:
            raise EpochGap(
                f"warp {self.warp_id}: diff {frame.from_epoch}->{frame.to_epoch} "
                f"does not follow epoch {self.epoch}",
                path="from_epoch",
            )
        graph = self.graph.copy()
        graph.apply_ops(frame.ops)
        self._check(graph, frame.state_hash, frame.to_epoch)
        self.graph = graph
        self.epoch = frame.to_epoch

    def _check(self, graph: RenderGraph, expected: bytes | None, epoch: int) -> None:
        if expected is None:
            return
        graph.check_hash(expected, f"warp {self.warp_id} epoch {epoch}")
        self.verified += 1


class WarpProducer:
    """The producer's graph and epoch: ``snapshot()`` and ``diff(ops)`` make frames that
    carry the state hash of the graph they lead to (so consumers can verify them)."""

    __slots__ = ("epoch", "graph", "hashed")

    def __init__(self, graph: RenderGraph | None = None, epoch: int = 0, *, hashed: bool = True):
        self.graph = graph or RenderGraph()
        self.epoch = epoch
        self.hashed = hashed

    def snapshot(self) -> WarpSnapshot:
        h = self.graph.state_hash() if self.hashed else None
        return WarpSnapshot(self.epoch, self.graph.to_plain(), h)

    def diff(self, ops: list[object]) -> WarpDiff:
        """Apply ``ops`` here first (``Desync`` if they do not fit), then describe them."""
        self.graph.apply_ops(ops)
        frame = WarpDiff(
            self.epoch, self.epoch + 1, ops, self.graph.state_hash() if self.hashed else None
        )
        self.epoch += 1
        return frame


__all__ = ["Desync", "Phase", "WarpConsumer", "WarpProducer"]
