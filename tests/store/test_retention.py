"""Checkpoints, trim and the server's maintenance round on a real journal file."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import msgspec
import pytest

from octosync.cli import main
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
    hub.connect(1, ViewKey("j"))
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
