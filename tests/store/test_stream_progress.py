"""A trim keeps what a registered continuous stream has not read (``store.stream_progress``),
on a real journal file."""

from __future__ import annotations

from pathlib import Path

import pytest

from octosync.cli import main
from octosync.crdt import OpKind, OpRecord, Timestamp
from octosync.store import stream_progress
from octosync.store.journal import Journal


def puts(n: int) -> list[OpRecord]:
    return [
        OpRecord("m", f"k{i}", OpKind.PUT, b"\x01", Timestamp(i, 0, "n"), "n", f"{i}:0:n")
        for i in range(1, n + 1)
    ]


def seqs(data: Path) -> list[int]:
    with Journal(data) as j:
        return [r.seq for r in j.read()]


def test_no_registered_stream_lets_the_trim_go_where_asked(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append(puts(6))
        done = j.trim(5, exported_through=6, ops_before=5)
    assert (done.before, done.deleted, done.held_at) == (5, 4, None)
    assert seqs(tmp_path) == [5, 6]


def test_the_lowest_committed_stream_holds_the_trim(tmp_path: Path) -> None:
    stream_progress.record(tmp_path, "fast", "/cp/fast", 5)
    stream_progress.record(tmp_path, "slow", "/cp/slow", 2)
    with Journal(tmp_path) as j:
        j.append(puts(6))
        done = j.trim(7, exported_through=6, ops_before=7)
        assert (done.before, done.deleted, done.held_at) == (3, 2, 3)
        assert j.trimmed_before() == 3
    assert seqs(tmp_path) == [3, 4, 5, 6]  # the slow stream reads from seq 3 on
    stream_progress.record(tmp_path, "slow", "/cp/slow", 6)  # it caught up
    with Journal(tmp_path) as j:
        done = j.trim(7, exported_through=6, ops_before=7)
    assert (done.before, done.held_at) == (6, 6)  # now the fast one holds it
    assert seqs(tmp_path) == [6]
    assert stream_progress.readers(tmp_path)["slow"] == stream_progress.StreamProgress(
        "/cp/slow", 6
    )


def test_an_unreadable_progress_file_holds_the_whole_journal(tmp_path: Path) -> None:
    stream_progress.progress_dir(tmp_path).mkdir(parents=True)
    (stream_progress.progress_dir(tmp_path) / "broken.json").write_text("{not json")
    with Journal(tmp_path) as j:
        j.append(puts(3))
        done = j.trim(4, exported_through=3, ops_before=4)
    assert (done.before, done.deleted, done.held_at) == (1, 0, 1)
    assert seqs(tmp_path) == [1, 2, 3]


def test_the_cli_says_a_stream_held_the_trim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "var", tmp_path / "export"
    with Journal(data) as j:
        j.append(puts(4))
    stream_progress.record(data, "s", "/cp", 2)
    assert main(["journal", "export", "--data", str(data), "--to", str(out)]) == 0
    args = ["journal", "trim", "--data", str(data), "--before", "5", "--exported-to", str(out)]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "trimmed 0 records below seq 3 (a registered stream has read only that far)" in said
