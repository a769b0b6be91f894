"""Checkpoints, trim and the server's maintenance round on a real journal file."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import msgspec
import pytest

from octosync.cli import main
from octosync.crdt import OpKind, OpRecord, Timestamp
from octosync.errors import TrimRefused
from octosync.hub import Hub, HubConfig, ViewKey, lazily_frame
from octosync.ipc.messages import CellSet, Delta, NodeSnapshot, Snapshot
from octosync.store.hub_hook import frame_record
from octosync.store.journal import Journal
from octosync.store.records import StreamFrame
from octosync.store.recovery import JournalState
from octosync.store.retention import JournalKeeper
from tests.hub.helpers import json_encoder

SNAP = Snapshot(0, (NodeSnapshot(1, "b", "resolved", b"0"),))


def frames(stream: str, start: int, count: int) -> list[StreamFrame]:
    """Deltas ``start -> start + count`` of one cell; a snapshot first when ``start`` is 0."""
    out = [frame_record(stream, lazily_frame(SNAP))] if start == 0 else []
    for e in range(start, start + count):
        delta = Delta(e, e + 1, (CellSet(1, str(e + 1).encode()),))
        out.append(frame_record(stream, lazily_frame(delta)))
    return out


def test_trim_refuses_unexported_and_uncovered_records(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(frames("a", 0, 3) + frames("b", 0, 3))  # seqs 1..8
        with pytest.raises(TrimRefused, match="not exported"):
            j.trim(5, exported_through=3)
        with pytest.raises(TrimRefused, match="'a'"):
            j.trim(5, exported_through=8)
        state = JournalState.load(j)
        j.put_checkpoints(state.checkpoints_due())
        assert j.uncovered_frames(9) == []
        with pytest.raises(TrimRefused, match="beyond"):
            j.trim(10, exported_through=8)
        assert j.trim(9, exported_through=8).deleted == 8
        assert list(j.read()) == []
        # Seqs are never reused, even with every row gone.
        assert j.latest_seq() == 8
        assert j.append(frames("a", 3, 1)) == [9]
        assert j.trimmed_before() == 9


def test_a_checkpoint_never_moves_back(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(frames("a", 0, 2))
        newer = JournalState.load(j).checkpoints_due()
        j.put_checkpoints(newer)
        older = [msgspec.structs.replace(c, through_seq=1, epoch=0) for c in newer]
        j.put_checkpoints(older)
        assert j.checkpoints()["a"] == newer[0]


def test_recovery_from_a_checkpoint_reads_only_the_tail(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(frames("a", 0, 50))
        j.put_checkpoints(JournalState.load(j).checkpoints_due())
        j.append(frames("a", 50, 2))
        full = JournalState.load(j, use_checkpoints=False)
        fast = JournalState.load(j)
    assert (full.frames_folded, fast.frames_folded, fast.checkpoints_used) == (51 + 2, 2, 1)
    assert fast.hub_frames("a") == full.hub_frames("a")
    (only,) = fast.hub_frames("a")
    assert isinstance(only.body, Snapshot)
    assert (only.body.epoch, only.body.nodes[0].payload) == (52, b"52")


def test_old_journals_get_their_scopes_listed_on_open(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(frames("a", 0, 1) + frames("b", 0, 1))
    conn = sqlite3.connect(tmp_path / "journal.sqlite3")
    conn.execute("DELETE FROM journal_scopes")
    conn.execute("DELETE FROM journal_meta WHERE name = 'scopes_indexed'")
    conn.commit()
    conn.close()
    with Journal(tmp_path) as j:
        assert j.scopes("frame") == ["a", "b"]


def test_a_steady_stream_keeps_the_journal_bounded(tmp_path: Path) -> None:
    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    keeper, report = JournalKeeper.start(hub, tmp_path, export_dir=tmp_path / "export")
    assert report.streams == 0
    with Journal(tmp_path) as writer:
        writer.append(frames("s", 0, 0))
        sizes = []
        for r in range(12):  # each round: 200 more deltas, then maintenance
            writer.append(frames("s", 200 * r, 200))
            done = keeper.round()
            assert done.trimmed_before == done.through_seq + 1  # everything covered went
            sizes.append(os.path.getsize(tmp_path / "journal.sqlite3"))
            (rows,) = (
                sqlite3.connect(tmp_path / "journal.sqlite3")
                .execute("SELECT count(*) FROM journal")
                .fetchone()
            )
            assert rows == 0
    keeper.close()
    assert max(sizes[4:]) <= max(sizes[:4])  # freed pages are reused: the file stops growing
    # A restart still serves the latest state, from the checkpoint alone.
    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    keeper, report = JournalKeeper.start(hub, tmp_path)
    keeper.close()
    assert (report.streams, report.frames_folded, report.checkpoints_used) == (1, 0, 1)
    snap = hub.latest_snapshot("s")
    assert snap is not None
    assert (snap.epoch, snap.nodes[0].payload) == (2400, b"2400")


def test_restored_state_waits_for_the_producers_snapshot(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(frames("s", 0, 5))
    hub = Hub(
        HubConfig(retain_after_producer_leaves=0.0), clock=lambda: 1e9, encoders={"j": json_encoder}
    )
    keeper, _ = JournalKeeper.start(hub, tmp_path)
    keeper.close()
    assert hub.expire() == []  # no producer, no TTL: kept
    hub.connect(1, ViewKey("lazily", "j"))
    with pytest.raises(Exception, match="before this producer's first snapshot"):
        hub.publish(1, "s", lazily_frame(Delta(5, 6, (CellSet(1, b"x"),))))
    assert hub.epoch_of("s") == 5
    hub.publish(1, "s", lazily_frame(Snapshot(0, SNAP.nodes)))
    assert hub.epoch_of("s") == 0


def test_cli_checkpoint_and_trim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, out = tmp_path / "var", tmp_path / "export"
    with Journal(data) as j:
        j.append(frames("s", 0, 9))
    assert main(["journal", "trim", "--data", str(data), "--before", "5"]) == 2
    assert "not exported" in capsys.readouterr().err
    assert main(["journal", "export", "--data", str(data), "--to", str(out)]) == 0
    args = ["journal", "trim", "--data", str(data), "--before", "5", "--exported-to", str(out)]
    assert main(args) == 2
    assert "no checkpoint covers" in capsys.readouterr().err
    assert main(["journal", "checkpoint", "--data", str(data)]) == 0
    assert "checkpointed 1 streams through seq 10" in capsys.readouterr().out
    assert main(args) == 0
    assert "trimmed 4 records below seq 5" in capsys.readouterr().out
    with Journal(data) as j:
        assert [e.seq for e in j.read()] == [5, 6, 7, 8, 9, 10]


def test_trim_keeps_op_records_the_topgun_maps_are_rebuilt_from(tmp_path: Path) -> None:
    put = OpRecord("users", "u1", OpKind.PUT, b"\x01", Timestamp(5, 0, "n"), "n", "5:0:n")
    with Journal(tmp_path) as j:
        j.append([*frames("a", 0, 1), put, *frames("a", 1, 1)])  # seqs 1..4, the op at 3
        j.put_checkpoints(JournalState.load(j).checkpoints_due())
        assert j.trim(5, exported_through=4).deleted == 3
        assert list(j.all_ops()) == [put]


def test_the_round_trims_op_records_only_below_what_the_compaction_covers(tmp_path: Path) -> None:
    def put(i: int) -> OpRecord:
        ts = Timestamp(i, 0, "n")
        return OpRecord("users", f"u{i}", OpKind.PUT, b"\x01", ts, "n", str(ts))

    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    covered = [0]
    keeper, _ = JournalKeeper.start(
        hub, tmp_path, export_dir=tmp_path / "export", ops_covered=lambda: covered[0]
    )
    with Journal(tmp_path) as writer:
        writer.append([*frames("s", 0, 2), put(4), put(5), *frames("s", 2, 2), put(8)])
        done = keeper.round()  # no compaction yet: every op record stays
        assert done.trimmed_before == 9
        assert [r.key for r in writer.all_ops()] == ["u4", "u5", "u8"]
        assert writer.ops_trimmed_before() == 1
        covered[0] = 5  # a compaction folded the journal up to seq 5
        keeper.round()
        assert [r.key for r in writer.all_ops()] == ["u8"]
        assert writer.ops_trimmed_before() == 6
        writer.append([put(9)])  # seq 9, nothing but an op since the last round
        covered[0] = 9
        done = keeper.round()
        assert done.trimmed_before == 10
        assert list(writer.all_ops()) == []
        assert writer.ops_trimmed_before() == 10
    keeper.close()


def test_trim_takes_op_records_no_further_than_the_frames(tmp_path: Path) -> None:
    op = OpRecord("m", "k", OpKind.PUT, b"\x01", Timestamp(1, 0, "n"), "n", "1:0:n")
    with Journal(tmp_path) as j:
        j.append([op, op, op, *frames("a", 0, 1)])  # ops at 1..3
        j.put_checkpoints(JournalState.load(j).checkpoints_due())
        assert j.trim(3, exported_through=5, ops_before=100).deleted == 2
        assert j.ops_trimmed_before() == 3
        assert len(list(j.all_ops())) == 1


def test_without_an_export_the_round_trims_what_checkpoints_cover(tmp_path: Path) -> None:
    """A base install has no pyarrow, so no export: its rounds still keep the journal bounded,
    and a restart still serves the latest state from the checkpoint."""
    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    keeper, _ = JournalKeeper.start(hub, tmp_path, export_dir=None, trim=True)
    with Journal(tmp_path) as writer:
        writer.append(frames("s", 0, 0))
        for r in range(3):
            writer.append(frames("s", 100 * r, 100))
            done = keeper.round()
            assert (done.exported, done.trimmed_before) == (0, done.through_seq + 1)
            assert list(writer.read()) == []
        writer.append(frames("s", 300, 5))  # after the last round: not checkpointed, kept
        assert [e.seq for e in writer.read()] == [303, 304, 305, 306, 307]
    keeper.close()
    assert not (tmp_path / "export").exists()
    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    keeper, report = JournalKeeper.start(hub, tmp_path)
    keeper.close()
    assert (report.checkpoints_used, report.frames_folded) == (1, 5)
    snap = hub.latest_snapshot("s")
    assert snap is not None
    assert (snap.epoch, snap.nodes[0].payload) == (305, b"305")


def test_with_retention_off_the_round_keeps_every_record(tmp_path: Path) -> None:
    hub = Hub(HubConfig(), clock=lambda: 0.0, encoders={"j": json_encoder})
    keeper, _ = JournalKeeper.start(hub, tmp_path, export_dir=None, trim=False)
    with Journal(tmp_path) as writer:
        writer.append(frames("s", 0, 20))
        done = keeper.round()
        assert (done.checkpoints, done.trimmed) == (1, 0)
        assert len(list(writer.read())) == 21
    keeper.close()
