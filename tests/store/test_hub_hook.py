from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from octosync.errors import InvalidRecord
from octosync.hub.model import DiffFrame, Sent, SnapshotFrame
from octosync.ipc.messages import Snapshot
from octosync.store.hub_hook import JournalRecorder, frame_record, journal_hook
from octosync.store.journal import GroupCommitWriter, Journal
from octosync.store.records import KIND_DROP, StreamDropped, StreamFrame, decode_record
from octosync.store.storage_rules import DirectPath


def test_accepted_frames_are_journalled_in_order(tmp_path: Path) -> None:
    with GroupCommitWriter(tmp_path) as writer:
        hook = journal_hook(writer)
        hook("scores", 1, SnapshotFrame(4, Snapshot(epoch=4), b"h4"))
        hook("scores", 1, DiffFrame(4, 5, {"ops": [1, 2]}))
    with Journal(tmp_path) as j:
        frames = [e.record for e in j.frames("scores")]
    assert [(f.snapshot, f.base_epoch, f.epoch, f.state_hash) for f in frames] == [  # type: ignore[union-attr]
        (True, 4, 4, b"h4"),
        (False, 4, 5, None),
    ]
    assert msgspec.msgpack.decode(frames[0].payload, type=Snapshot) == Snapshot(epoch=4)  # type: ignore[union-attr]
    assert msgspec.msgpack.decode(frames[1].payload) == {"ops": [1, 2]}  # type: ignore[union-attr]


def test_something_else_is_refused() -> None:
    with pytest.raises(InvalidRecord):
        frame_record("s", object())  # type: ignore[arg-type]


def test_the_recorder_refuses_instead_of_waiting_when_the_writer_is_behind(
    tmp_path: Path,
) -> None:
    import threading

    from octosync.errors import StorageError
    from octosync.store.hub_hook import JournalRecorder

    release = threading.Event()

    def slow_clock() -> int:  # the writer thread reads it inside each commit
        release.wait(timeout=30)
        return 0

    writer = GroupCommitWriter(tmp_path, max_queue=2, clock=slow_clock)
    recorder = JournalRecorder(DirectPath(writer))
    accepted = refused = 0
    reasons: set[str] = set()
    for epoch in range(50):
        try:
            prepared = recorder.prepare("s", 1, SnapshotFrame(epoch, Snapshot(epoch=epoch)))
        except StorageError as err:
            reasons.add(err.message)
            refused += 1
            continue
        prepared()  # never blocks: prepare checked there was room
        accepted += 1
    release.set()
    writer.close()
    with Journal(tmp_path) as j:
        stored = [e.record.epoch for e in j.frames("s")]  # type: ignore[union-attr]
    assert refused > 0
    assert reasons == {"the journal writer is behind: its queue is full"}
    assert len(stored) == accepted == 50 - refused


def test_a_frame_with_the_producers_bytes_is_journalled_as_those_bytes(tmp_path: Path) -> None:
    sent = Sent("json", b'{"type":"snapshot","epoch":4,"nodes":[]}')
    with GroupCommitWriter(tmp_path) as writer:
        journal_hook(writer)("scores", 1, SnapshotFrame(4, Snapshot(epoch=4), None, sent))
    with Journal(tmp_path) as j:
        (entry,) = j.frames("scores")
    assert isinstance(entry.record, StreamFrame)
    assert (entry.record.payload, entry.record.codec) == (sent.data, "json")


def test_a_dialect_the_journal_does_not_know_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    with GroupCommitWriter(tmp_path) as writer:
        recorder = JournalRecorder(DirectPath(writer))
        frame = SnapshotFrame(4, Snapshot(epoch=4), None, Sent("yaml", b"epoch: 4"))
        with pytest.raises(InvalidRecord) as caught:
            recorder.prepare("scores", 1, frame)
    assert caught.value.path == "$.codec"
    with Journal(tmp_path) as j:
        assert list(j.frames("scores")) == []


def test_a_drop_is_journalled_as_its_own_record(tmp_path: Path) -> None:
    with GroupCommitWriter(tmp_path) as writer:
        recorder = JournalRecorder(DirectPath(writer))
        recorder.prepare_drop("scores")()
    with Journal(tmp_path) as j:
        rows = j.scoped_rows(KIND_DROP, "scores", 1, j.latest_seq())
    assert [decode_record(r.kind, r.body, seq=r.seq) for r in rows] == [StreamDropped("scores")]


def test_each_frame_names_its_producing_connection_and_server_run(tmp_path: Path) -> None:
    from octosync.store.hub_hook import JournalRecorder

    with GroupCommitWriter(tmp_path) as writer:
        first, second = (
            JournalRecorder(DirectPath(writer), run="r1"),
            JournalRecorder(DirectPath(writer), run="r2"),
        )
        first.prepare("s", 1, SnapshotFrame(0, Snapshot(epoch=0)))()
        first.prepare("s", 2, SnapshotFrame(1, Snapshot(epoch=1)))()
        second.prepare("s", 1, SnapshotFrame(2, Snapshot(epoch=2)))()
        default = JournalRecorder(DirectPath(writer))
        default.prepare("s", 1, SnapshotFrame(3, Snapshot(epoch=3)))()
    with Journal(tmp_path) as j:
        producers = [e.record.producer for e in j.frames("s")]  # type: ignore[union-attr]
    assert producers[:3] == ["r1.1", "r1.2", "r2.1"]
    run, conn = producers[3].split(".")  # type: ignore[union-attr]
    assert conn == "1"
    assert int(run, 16) > 0  # the start time in ms, hex


def test_a_frame_journalled_before_producers_were_named_reads_as_unnamed() -> None:
    from octosync.store.records import KIND_FRAME

    old = msgspec.msgpack.encode(
        {"stream": "s", "base_epoch": 0, "epoch": 0, "snapshot": True, "payload": b"p"}
    )
    record = decode_record(KIND_FRAME, old, seq=1)
    assert isinstance(record, StreamFrame)
    assert record.producer is None
