"""The one commit path's interpreter against a real journal: after-commit effects only once
committed, in commit order; a failed commit answers its failure and runs none of them; the
storage rules refuse before anything is submitted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import JournalUnavailable, OctosyncError, Overloaded, StorageError
from octosync.server.commit import Committer
from octosync.store.commit_path import Ask, Commit
from octosync.store.journal import GroupCommitWriter, Journal
from octosync.store.records import EncodedRecord, encode_record
from octosync.store.storage_rules import JournalWritable, QueueRoom, StorageSettings, rules_for
from tests.store.faults import journal_files, need_root, set_immutable

WAIT = 10.0


def _record(i: int) -> EncodedRecord:
    op = OpRecord("m", f"k{i}", OpKind.PUT, b"\x01", Timestamp(i, 0, "n"), "n", f"n:{i}")
    return encode_record(op)


async def _settle(got: list[Any], n: int) -> None:
    """Let the loop run until ``got`` holds ``n`` entries (the writer thread commits)."""
    async with asyncio.timeout(WAIT):
        while len(got) < n:
            await asyncio.sleep(0.005)


async def test_after_commit_effects_run_once_committed_in_commit_order(tmp_path: Path) -> None:
    with GroupCommitWriter(tmp_path) as writer:
        faults: list[tuple[int, OctosyncError]] = []
        path = Committer(writer, rules_for(writer, tmp_path, StorageSettings()), _to(faults))
        ran: list[object] = []
        for i in range(1, 6):
            path.refuse()
            path.submit(Commit(i, (_record(i),), (lambda i=i: ran.append((i, _seqs(tmp_path))),)))
        assert ran == []  # nothing runs before the commit is back on the loop
        await _settle(ran, 5)
        assert [i for i, _ in ran] == [1, 2, 3, 4, 5]  # type: ignore[misc]
        for i, seqs in ran:  # type: ignore[misc]
            assert i in seqs  # each effect saw its own record durable
        assert faults == []


def _seqs(data: Path) -> set[int]:
    with Journal(data, readonly=True) as j:
        return {e.seq for e in j.read()}


def _to(faults: list[tuple[int, OctosyncError]]):  # type: ignore[no-untyped-def]
    def fault(conn: int, err: OctosyncError) -> None:
        faults.append((conn, err))

    return fault


async def test_without_a_journal_nothing_is_refused_and_effects_run_at_once() -> None:
    path = Committer(None, (), lambda conn, err: None)
    ran: list[int] = []
    path.refuse(Ask(room=True))
    path.submit(Commit(3, (_record(1),), (lambda: ran.append(1), lambda: ran.append(2))))
    assert ran == [1, 2]
    assert not path.journaled


async def test_a_failed_commit_answers_its_failure_and_runs_no_effect(tmp_path: Path) -> None:
    need_root()
    writer = GroupCommitWriter(tmp_path)
    try:
        faults: list[tuple[int, OctosyncError]] = []
        path = Committer(writer, rules_for(writer, tmp_path, StorageSettings()), _to(faults))
        path.submit(Commit(1, (_record(1),)))
        await asyncio.wrap_future(writer.submit_encoded([]))
        set_immutable(journal_files(tmp_path), True)
        ran: list[int] = []
        answered: list[OctosyncError] = []
        path.submit(Commit(7, (_record(2),), (lambda: ran.append(2),)))  # default: reset 7
        path.submit(Commit(8, (_record(3),), (lambda: ran.append(3),), answered.append))
        await _settle(answered, 1)
        await _settle(faults, 1)
        assert ran == []
        assert [conn for conn, _ in faults] == [7]
        assert isinstance(faults[0][1], JournalUnavailable)
        assert isinstance(answered[0], JournalUnavailable)
        with pytest.raises(JournalUnavailable):  # refused up front from now on
            path.refuse()
    finally:
        set_immutable(journal_files(tmp_path), False)
        writer.close()


def test_the_rules_are_asked_in_order_and_the_queue_rule_words_it_as_the_face_asks(
    tmp_path: Path,
) -> None:
    import threading

    release = threading.Event()

    def slow_clock() -> int:  # the writer thread reads it inside each commit
        release.wait(timeout=30)
        return 0

    writer = GroupCommitWriter(tmp_path, max_queue=2, clock=slow_clock)
    try:
        rules = rules_for(writer, tmp_path, StorageSettings())
        assert [type(r) for r in rules[:2]] == [JournalWritable, QueueRoom]
        for i in range(1, 5):  # the thread takes one and waits; the queue fills behind it
            if writer.has_room():
                writer.submit_encoded([_record(i)], block=False)
        assert not writer.has_room()
        path = Committer(writer, rules, lambda conn, err: None)
        with pytest.raises(StorageError, match=r"queue is full$"):
            path.refuse()
        with pytest.raises(Overloaded, match="queue is full; resend"):
            path.refuse(Ask(Overloaded, "resend"))
        path.refuse(Ask(room=False))  # asks only the journal's health
    finally:
        release.set()
        writer.close()
