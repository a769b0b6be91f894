from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import InvalidRecord, JournalCorrupt, StorageError
from octosync.store.journal import ROWS_PER_INSERT, GroupCommitWriter, Journal, journal_path
from octosync.store.records import StreamFrame


def op(i: int, map_name: str = "m", key: str = "k") -> OpRecord:
    return OpRecord(map_name, key, OpKind.PUT, b"\x01", Timestamp(i, 0, "n"), "n", f"n:{i}")


def frame(stream: str, epoch: int, *, snapshot: bool = False) -> StreamFrame:
    base = epoch if snapshot else epoch - 1
    return StreamFrame(stream=stream, base_epoch=base, epoch=epoch, snapshot=snapshot, payload=b"p")


def test_seqs_increase_by_one_and_reads_filter(tmp_path: Path) -> None:
    with Journal(tmp_path, clock=lambda: 1234) as j:
        assert j.latest_seq() == 0
        assert j.append([op(1), frame("s", 0, snapshot=True)]) == [1, 2]
        assert j.append([op(2, "other"), frame("s", 1), frame("t", 5, snapshot=True)]) == [3, 4, 5]
        assert j.latest_seq() == 5
        assert [e.seq for e in j.read(2, 4)] == [2, 3, 4]
        assert [e.record for e in j.ops("m")] == [op(1)]
        assert [e.seq for e in j.frames("s")] == [2, 4]
        assert [e.seq for e in j.frames("s", start=3)] == [4]
        assert {e.recorded_ms for e in j.read()} == {1234}


def test_reopen_keeps_records(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.append([op(i) for i in range(10)])
    with Journal(tmp_path, readonly=True) as j:
        assert [e.record for e in j.read()] == [op(i) for i in range(10)]


@pytest.mark.parametrize(
    ("record", "path"),
    [
        (OpRecord("", "k", OpKind.PUT, b"", Timestamp(1, 0, "n"), "n", "i"), "$.map"),
        (OpRecord("m", "k", OpKind.PUT, b"", Timestamp(-1, 0, "n"), "n", "i"), "$.ts.millis"),
        (OpRecord("m", "k", OpKind.PUT, b"", Timestamp(1, 0, "a:b"), "n", "i"), "$.ts.node_id"),
        (StreamFrame(stream="s", base_epoch=3, epoch=3, snapshot=False, payload=b""), "$.epoch"),
        (
            StreamFrame(stream="s", base_epoch=2, epoch=3, snapshot=True, payload=b""),
            "$.base_epoch",
        ),
        (
            StreamFrame(stream="s", base_epoch=0, epoch=2**60, snapshot=False, payload=b""),
            "$.epoch",
        ),
    ],
)
def test_invalid_records_are_refused_with_the_field_and_change_nothing(
    tmp_path: Path, record: OpRecord | StreamFrame, path: str
) -> None:
    with Journal(tmp_path) as j:
        j.append([op(0)])
        with pytest.raises(InvalidRecord) as info:
            j.append([op(1), record])
        assert info.value.path == path
        assert j.latest_seq() == 1


def test_unknown_kind_in_the_file_is_reported_as_corrupt(tmp_path: Path) -> None:
    import sqlite3

    with Journal(tmp_path) as j:
        j.append([op(1)])
    conn = sqlite3.connect(journal_path(tmp_path))
    conn.execute("INSERT INTO journal VALUES (2, 'device_event', 'x', 0, x'00')")
    conn.commit()
    conn.close()
    with Journal(tmp_path) as j, pytest.raises(JournalCorrupt) as info:
        list(j.read())
    assert info.value.path == "seq 2"


def test_readonly_open_of_a_missing_journal_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        Journal(tmp_path / "nowhere", readonly=True)


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_group_commit_shares_transactions_between_threads(tmp_path: Path, durability: str) -> None:
    results: list[list[int]] = []
    lock = threading.Lock()
    with GroupCommitWriter(tmp_path, durability=durability) as w:  # type: ignore[arg-type]

        def worker(t: int) -> None:
            for i in range(50):
                seqs = w.append([op(t * 1000 + i, key=f"t{t}")])
                with lock:
                    results.append(seqs)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        commits = w.commits
    seqs = sorted(s for r in results for s in r)
    assert seqs == list(range(1, 401))
    assert commits < 400, "concurrent appends were grouped into fewer transactions"
    with Journal(tmp_path) as j:
        for t in range(8):  # each thread's appends kept its own order
            assert [e.record.ts.millis for e in j.ops("m") if e.record.key == f"t{t}"] == [  # type: ignore[union-attr]
                t * 1000 + i for i in range(50)
            ]


async def test_async_appends_resolve_after_commit(tmp_path: Path) -> None:
    with GroupCommitWriter(tmp_path) as w:
        seqs = await asyncio.gather(*(w.append_async([frame("s", e)]) for e in range(1, 101)))
        assert sorted(s for r in seqs for s in r) == list(range(1, 101))
        with Journal(tmp_path, readonly=True) as reader:  # committed, visible to another reader
            assert reader.latest_seq() == 100


def test_invalid_record_raises_at_submit_and_others_still_commit(tmp_path: Path) -> None:
    bad = StreamFrame(stream="", base_epoch=0, epoch=0, snapshot=True, payload=b"")
    with GroupCommitWriter(tmp_path) as w:
        with pytest.raises(InvalidRecord):
            w.submit([op(1), bad])
        assert w.append([op(2)]) == [1]


@given(st.lists(st.lists(st.integers(0, 2**40), max_size=5), max_size=8))
def test_appends_read_back_in_order(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[int]]
) -> None:
    d = tmp_path_factory.mktemp("j")
    with Journal(d, durability="normal") as j:
        for batch in batches:
            j.append([op(i) for i in batch])
        assert [e.record for e in j.read()] == [op(i) for b in batches for i in b]
        assert j.latest_seq() == sum(len(b) for b in batches)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3 * ROWS_PER_INSERT + 7), min_size=1, max_size=4))
def test_batches_of_any_size_keep_every_row_and_its_seq(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int]
) -> None:
    """Large batches go in several multi-row statements: none is lost, doubled or reordered."""
    d = tmp_path_factory.mktemp("j")
    records = [op(i, key=f"k{i}") for i in range(sum(sizes))]
    with Journal(d, durability="normal") as j:
        at, seqs = 0, []
        for n in sizes:
            seqs += j.append(records[at : at + n])
            at += n
        assert seqs == list(range(1, len(records) + 1))
        assert [(e.seq, e.record) for e in j.read()] == list(zip(seqs, records, strict=True))


@pytest.mark.parametrize(("durability", "after"), [("full", 40), ("normal", 40), ("full", 301)])
def test_kill_9_mid_append_loses_no_acknowledged_record(
    tmp_path: Path, durability: str, after: int
) -> None:
    script = Path(__file__).with_name("_crash_writer.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), durability],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked: list[int] = []
    try:
        for line in proc.stdout:  # bounded: we kill it once enough acks arrived
            acked.append(int(line))
            if len(acked) >= after:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(acked) >= after
    with Journal(tmp_path) as j:
        latest = j.latest_seq()
        entries = list(j.read())  # every row decodes: no partial record
        assert [e.seq for e in entries] == list(range(1, latest + 1))
        assert set(acked) <= {e.seq for e in entries}
        assert j.append([op(10**6)]) == [latest + 1]  # and the journal goes on after recovery
