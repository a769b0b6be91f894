"""Every stream's latest state, rebuilt from the journal: the newest checkpoint, then the frames
journaled after it (from the first frame when a stream has no checkpoint).

The fold uses the hub's own models, so a stream ends where the hub would have it: names that
start with ``warp:`` are WVP streams (``ReplayModel``: the latest snapshot and the diffs since,
kept as the journaled records because the hub cannot apply WVP ops), every other name is a
lazily state-plane stream (``GraphModel``: applied op by op, checkpointed as one Snapshot).
Frames were accepted by the hub before they were journaled, so state hashes are not checked
again here (that would cost O(graph) per frame). A frame that does not apply all the same (a
journal written by a buggy or foreign producer) leaves its stream without state until the
journal's next snapshot for it, and the stream is named in ``RecoveryReport.broken``.

``JournalState`` is also what the server's maintenance round keeps between rounds: it folds
the rows appended since the last round (one range read) and hands out checkpoints for the
streams that changed, so checkpointing costs what was appended, not the journal's length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

import msgspec

from octosync.errors import DecodeError, OctosyncError
from octosync.hub.model import Body, DiffFrame, Frame, GraphModel, ReplayModel, SnapshotFrame
from octosync.hub.streams import stream_face
from octosync.ipc.messages import CrdtOp, Delta, Snapshot
from octosync.store.journal import Journal
from octosync.store.plane_compaction import plane_records
from octosync.store.records import (
    KIND_DROP,
    KIND_FRAME,
    KIND_PLANE,
    StreamCheckpoint,
    StreamDropped,
    StreamFrame,
    decode_record,
)
from octosync.wire import dialect, wvp

_CHUNK: Final = 20_000

_lazily = msgspec.msgpack.Decoder(Snapshot | Delta)
_encode = msgspec.msgpack.Encoder().encode


def _lazily_message(record: StreamFrame) -> Snapshot | Delta:
    """A journaled state-plane frame, decoded from the dialect its producer sent it in."""
    if record.codec is None:
        legacy: Snapshot | Delta = _lazily.decode(record.payload)
        return legacy
    msg = dialect(record.codec).decode(record.payload)
    if not isinstance(msg, Snapshot | Delta):
        raise DecodeError(f"journaled {type(msg).__name__} is not a stream frame", path="payload")
    return msg


def is_wvp_stream(stream: str) -> bool:
    return stream_face(stream) == "wvp"


class Restorable(Protocol):
    """What recovery needs from the hub (``Hub.restore``)."""

    def restore(self, stream: str, frames: list[Frame[Body]]) -> None: ...


class RecoveryReport(msgspec.Struct, frozen=True):
    streams: int
    """Streams with a state to serve."""
    frames_folded: int
    """Journal frames applied after the checkpoints (all of them when none was used)."""
    checkpoints_used: int
    through_seq: int
    """The journal's latest seq when it was read: the state reflects every frame up to it."""
    broken: tuple[str, ...] = ()


@dataclass(slots=True)
class _Fold:
    model: GraphModel | ReplayModel[StreamFrame]
    """A ReplayModel here holds the journaled ``StreamFrame`` records as frame bodies."""
    through_seq: int = 0
    checkpointed_seq: int = 0
    broken: bool = False


def _new_model(stream: str, max_replay_diffs: int) -> GraphModel | ReplayModel[StreamFrame]:
    return ReplayModel[StreamFrame](max_replay_diffs) if is_wvp_stream(stream) else GraphModel()


@dataclass
class JournalState:
    """Streams folded from the journal up to ``through_seq``; see the module docstring."""

    max_replay_diffs: int = 1024
    through_seq: int = 0
    frames_folded: int = 0
    checkpoints_used: int = 0
    _folds: dict[str, _Fold] = field(default_factory=dict)

    # --- building -----------------------------------------------------------------------------

    @classmethod
    def load(
        cls, journal: Journal, *, use_checkpoints: bool = True, max_replay_diffs: int = 1024
    ) -> JournalState:
        """Fold every stream: its checkpoint (unless told not to) and the frames after it."""
        state = cls(max_replay_diffs)
        latest = journal.latest_seq()
        checkpoints = journal.checkpoints() if use_checkpoints else {}
        streams = set(journal.scopes(KIND_FRAME)) | set(checkpoints)
        for stream in sorted(streams):
            fold = state._fold_of(stream)
            start = 1
            cp = checkpoints.get(stream)
            if cp is not None and cp.through_seq <= latest:
                state._load_checkpoint(stream, fold, cp)
                start = cp.through_seq + 1
                state.checkpoints_used += 1
            drops = journal.scoped_rows(KIND_DROP, stream, start, latest)
            if drops:  # the hub let the state go: only frames after the last drop count
                fold = state._drop(stream, drops[-1].seq)
                start = drops[-1].seq + 1
            for row in journal.scoped_rows(KIND_FRAME, stream, start, latest):
                record = decode_record(KIND_FRAME, row.body, seq=row.seq)
                assert isinstance(record, StreamFrame)
                state._fold_record(stream, fold, row.seq, record)
        state.through_seq = latest
        return state

    def advance(self, journal: Journal) -> int:
        """Fold the rows appended since ``through_seq``; returns how many frames that was."""
        latest = journal.latest_seq()
        start, folded = self.through_seq + 1, 0
        while start <= latest:
            rows = journal.raw_rows(start, latest, limit=_CHUNK)
            if not rows:
                break
            for row in rows:
                if row.kind == KIND_DROP:
                    dropped = decode_record(row.kind, row.body, seq=row.seq)
                    assert isinstance(dropped, StreamDropped)
                    self._drop(dropped.stream, row.seq)
                if row.kind != KIND_FRAME:
                    continue
                record = decode_record(row.kind, row.body, seq=row.seq)
                assert isinstance(record, StreamFrame)
                self._fold_record(record.stream, self._fold_of(record.stream), row.seq, record)
                folded += 1
            start = rows[-1].seq + 1
        self.through_seq = max(self.through_seq, latest)
        return folded

    def _fold_of(self, stream: str) -> _Fold:
        fold = self._folds.get(stream)
        if fold is None:
            fold = self._folds[stream] = _Fold(_new_model(stream, self.max_replay_diffs))
        return fold

    def _load_checkpoint(self, stream: str, fold: _Fold, cp: StreamCheckpoint) -> None:
        if not cp.frames and cp.epoch is not None and isinstance(fold.model, ReplayModel):
            fold.model.epoch = cp.epoch
            fold.model.stale = True
        for frame in cp.frames:
            self._apply(stream, fold, frame)
        fold.through_seq = fold.checkpointed_seq = cp.through_seq

    def _drop(self, stream: str, seq: int) -> _Fold:
        """The hub dropped ``stream``'s state at ``seq``: fold it from nothing again (the next
        checkpoint records the empty state, so a trim cannot bring the old one back)."""
        old = self._fold_of(stream)
        fold = self._folds[stream] = _Fold(_new_model(stream, self.max_replay_diffs))
        fold.through_seq, fold.checkpointed_seq = seq, old.checkpointed_seq
        return fold

    def _fold_record(self, stream: str, fold: _Fold, seq: int, record: StreamFrame) -> None:
        self._apply(stream, fold, record)
        fold.through_seq = seq
        self.frames_folded += 1

    def _apply(self, stream: str, fold: _Fold, record: StreamFrame) -> None:
        if fold.broken and not record.snapshot:
            return
        model = fold.model
        try:
            if isinstance(model, ReplayModel):
                if record.snapshot:
                    model.reset(SnapshotFrame(record.epoch, record))
                else:
                    model.apply(DiffFrame(record.base_epoch, record.epoch, record))
            else:
                msg = _lazily_message(record)
                if isinstance(msg, Snapshot):
                    model.reset(SnapshotFrame(msg.epoch, msg))
                else:
                    model.apply(DiffFrame(msg.base_epoch, msg.epoch, msg))
        except (OctosyncError, msgspec.MsgspecError, ValueError):
            fold.model = _new_model(stream, self.max_replay_diffs)
            fold.broken = True
            return
        fold.broken = False

    # --- reading ------------------------------------------------------------------------------

    def streams(self) -> list[str]:
        """Streams that have a state (or at least an epoch) to serve."""
        return [s for s, f in self._folds.items() if f.model.epoch is not None]

    def broken(self) -> tuple[str, ...]:
        return tuple(sorted(s for s, f in self._folds.items() if f.broken))

    def epoch_of(self, stream: str) -> int | None:
        fold = self._folds.get(stream)
        return None if fold is None else fold.model.epoch

    def hub_frames(self, stream: str) -> list[Frame[Body]]:
        """What the hub needs to serve ``stream`` as it did: its snapshot (and WVP diffs)."""
        fold = self._folds.get(stream)
        if fold is None:
            return []
        model = fold.model
        if isinstance(model, GraphModel):
            snap = model.snapshot()
            return [] if snap is None else [SnapshotFrame(snap.epoch, snap)]
        out: list[Frame[Body]] = []
        try:
            for frame in model.replay():
                rec = frame.body
                body = wvp.decode_frame(rec.payload)  # as journaled: canonical CBOR
                if rec.snapshot and isinstance(body, wvp.WarpSnapshot):
                    out.append(SnapshotFrame(rec.epoch, body, rec.state_hash))
                elif not rec.snapshot and isinstance(body, wvp.WarpDiff):
                    out.append(DiffFrame(rec.base_epoch, rec.epoch, body, rec.state_hash))
                else:
                    raise DecodeError("journaled WVP frame of the wrong kind", path="payload")
        except (OctosyncError, msgspec.MsgspecError):
            fold.broken = True
            return []
        return out

    # --- checkpoints --------------------------------------------------------------------------

    def checkpoints_due(self) -> list[StreamCheckpoint]:
        """A checkpoint for every stream with frames folded since its last one."""
        out = []
        for stream, fold in self._folds.items():
            if fold.through_seq <= fold.checkpointed_seq:
                continue
            out.append(self._checkpoint(stream, fold))
        return out

    def _checkpoint(self, stream: str, fold: _Fold) -> StreamCheckpoint:
        model = fold.model
        frames: tuple[StreamFrame, ...] = ()
        if fold.broken:  # nothing to serve until the next snapshot: that is what it records
            return StreamCheckpoint(stream, self.through_seq, None, ())
        if isinstance(model, GraphModel):
            snap = model.snapshot()
            if snap is not None:
                payload = _encode(snap)
                frames = (StreamFrame(stream, snap.epoch, snap.epoch, True, payload),)
        else:
            frames = tuple(f.body for f in model.replay())
        return StreamCheckpoint(stream, self.through_seq, model.epoch, frames)

    def mark_checkpointed(self, checkpoints: Iterable[StreamCheckpoint]) -> None:
        for cp in checkpoints:
            fold = self._folds.get(cp.stream)
            if fold is not None:
                fold.checkpointed_seq = max(fold.checkpointed_seq, cp.through_seq)

    def covered_through(self) -> int:
        """Every frame up to this seq is covered by a checkpoint written so far."""
        pending = [
            f.checkpointed_seq for f in self._folds.values() if f.through_seq > f.checkpointed_seq
        ]
        return min(pending, default=self.through_seq)

    # --- the hub ------------------------------------------------------------------------------

    def restore_into(self, hub: Restorable) -> RecoveryReport:
        restored = 0
        for stream in sorted(self._folds):
            frames = self.hub_frames(stream)
            if frames:
                hub.restore(stream, frames)
                restored += 1
        return RecoveryReport(
            restored, self.frames_folded, self.checkpoints_used, self.through_seq, self.broken()
        )


def recover(hub: Restorable, journal: Journal, *, max_replay_diffs: int = 1024) -> JournalState:
    """Rebuild the hub's streams from ``journal``; returns the state for later checkpointing."""
    state = JournalState.load(journal, max_replay_diffs=max_replay_diffs)
    state.restore_into(hub)
    return state


class PlaneRestorable(Protocol):
    def restore(self, name: str, ops: Iterable[CrdtOp]) -> None: ...

    replica_position: int


def restore_planes(journal: Journal, planes: PlaneRestorable) -> int:
    """Merge every journaled CRDT plane record into ``planes`` (blocking: run it in a thread);
    returns how many records that was. Merges commute, so the order does not matter. The
    highest cluster stream position journaled becomes ``planes.replica_position``: records
    commit in the order they were queued, so every batch up to it is on disk."""
    count = 0
    latest = journal.latest_seq()
    for stream in journal.scopes(KIND_PLANE):
        for record in plane_records(journal, stream, latest):
            planes.restore(record.stream, record.ops)
            if record.position is not None:
                planes.replica_position = max(planes.replica_position, record.position)
            count += 1
    return count
