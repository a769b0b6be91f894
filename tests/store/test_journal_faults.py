"""A failed commit fails every ack that waited on it, and nothing acknowledged is ever lost.

The faults are real: the journal's files are made immutable (``chattr +i``), so SQLite's own
writes fail below it (and, for the shared-memory index it maps, would have been SIGBUS).
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import JournalUnavailable
from octosync.store.journal import GroupCommitWriter, Journal
from octosync.topgun import TopGunCore
from octosync.wire import topgun as tg
from tests.store.faults import journal_files, need_root, set_immutable
from tests.topgun.helpers import ALL, Clock, batch, put

WAIT = 10.0


def _op(i: int) -> OpRecord:
    return OpRecord("m", f"k{i}", OpKind.PUT, b"\x01", Timestamp(i, 0, "n"), "n", f"n:{i}")


def _until_available(writer: GroupCommitWriter) -> None:
    deadline = time.monotonic() + WAIT
    while not writer.health().available:
        assert time.monotonic() < deadline, writer.health()
        time.sleep(0.01)


def test_a_failed_commit_fails_its_acks_and_its_records_are_written_when_it_can(
    tmp_path: Path,
) -> None:
    need_root()
    writer = GroupCommitWriter(tmp_path)
    try:
        assert writer.append([_op(1)]) == [1]
        set_immutable(journal_files(tmp_path), True)
        failed = writer.submit([_op(2)])
        with pytest.raises(JournalUnavailable, match=r"not writable|readonly|read-only"):
            failed.result(WAIT)
        with pytest.raises(JournalUnavailable):
            writer.check_writable()
        behind = writer.submit([_op(3)])  # accepted before the refusal was seen: waits too
        with pytest.raises(JournalUnavailable):
            behind.result(WAIT)
        health = writer.health()
        assert (health.available, health.unwritten) == (False, 2)
        assert health.failed_commits >= 1
        set_immutable(journal_files(tmp_path), False)
        _until_available(writer)
        writer.check_writable()
        assert writer.append([_op(4)]) == [4]
    finally:
        set_immutable(journal_files(tmp_path), False)
        writer.close()
    with Journal(tmp_path, readonly=True) as j:
        assert [(e.seq, e.record) for e in j.read()] == [(i, _op(i)) for i in (1, 2, 3, 4)]


def test_records_still_waiting_at_close_are_reported_not_invented(tmp_path: Path) -> None:
    """A crash while the journal cannot commit loses only records nobody was told about."""
    need_root()
    writer = GroupCommitWriter(tmp_path)
    writer.append([_op(1)])
    set_immutable(journal_files(tmp_path), True)
    try:
        with pytest.raises(JournalUnavailable):
            writer.submit([_op(2)]).result(WAIT)
        writer.close()
    finally:
        set_immutable(journal_files(tmp_path), False)
    with Journal(tmp_path, readonly=True) as j:
        assert [e.record for e in j.read()] == [_op(1)]


_decode_value = msgspec.msgpack.Decoder()


class PersistedAcks(RuleBasedStateMachine):
    """TopGun's core with a real journal: writers send PERSISTED batches, commits fail and
    heal, clients resend what was not acknowledged (unchanged, as TopGun's client does), the
    server crashes (whatever waited in memory is gone) and restarts from the journal. Every
    op ever acknowledged PERSISTED is in the restarted server's map."""

    def __init__(self) -> None:
        super().__init__()
        self.data = Path()
        self.clock = Clock(1_000)
        self.writer: GroupCommitWriter | None = None
        self.core = TopGunCore(self.clock, persistent=True)
        self.broken = False
        self.acked: dict[str, tuple[int, int]] = {}
        """key -> (value, millis) of the newest op acknowledged PERSISTED."""
        self.unacked: list[tg.OpBatch] = []
        self.next_id = 0

    @initialize(data=st.builds(lambda: None))
    def open(self, data: None) -> None:
        import tempfile

        self.data = Path(tempfile.mkdtemp(prefix="persisted-acks-"))
        self._start()

    def _start(self) -> None:
        self.writer = GroupCommitWriter(self.data)
        self.core = TopGunCore(self.clock, persistent=True)
        with Journal(self.data, readonly=True) as j:
            self.core.load(j.all_ops())
        self.core.connect(1, ALL)

    def _send(self, message: tg.OpBatch) -> None:
        """One batch through the core and the journal, acked only after its commit."""
        assert self.writer is not None
        try:
            self.writer.check_writable()
        except JournalUnavailable:
            self.unacked.append(message)
            return
        fx = self.core.handle(1, message)
        self.core.flush()
        future = self.writer.submit_encoded(fx.records)
        try:
            future.result(WAIT)
        except JournalUnavailable:
            self.unacked.append(message)  # the connection is reset: the client resends
            return
        assert fx.durable, "a PERSISTED batch is acknowledged once committed"
        for op in message.payload.ops:
            assert op.record is not None
            millis = op.record.timestamp.millis
            value = _decode_value.decode(bytes(op.record.value))  # type: ignore[arg-type]
            if op.key not in self.acked or self.acked[op.key][1] < millis:
                self.acked[op.key] = (value, millis)

    @rule(key=st.integers(0, 4), value=st.integers(0, 99))
    def write(self, key: int, value: int) -> None:
        self.next_id += 1
        self.clock.now += 1
        op = put(str(self.next_id), f"k{key}", value, self.clock.now)
        self._send(batch(op, write_concern="PERSISTED"))

    @precondition(lambda self: bool(self.unacked))
    @rule()
    def resend(self) -> None:
        pending, self.unacked = self.unacked, []
        for message in pending:
            self._send(message)

    @precondition(lambda self: not self.broken)
    @rule()
    def break_disk(self) -> None:
        set_immutable(journal_files(self.data), True)
        self.broken = True

    @precondition(lambda self: self.broken)
    @rule()
    def heal_disk(self) -> None:
        set_immutable(journal_files(self.data), False)
        self.broken = False
        assert self.writer is not None
        if self.writer.health().unwritten:
            _until_available(self.writer)

    @rule()
    def crash_and_restart(self) -> None:
        assert self.writer is not None
        self.writer.close()  # one last try; what still waits is lost, as in a crash
        set_immutable(journal_files(self.data), False)
        self.broken = False
        self._start()

    @invariant()
    def nothing_acknowledged_is_lost(self) -> None:
        if self.writer is None:
            return
        with Journal(self.data, readonly=True) as j:
            durable = TopGunCore(self.clock, persistent=True)
            durable.load(j.all_ops())
        for key, (value, millis) in self.acked.items():
            winner = durable.maps.store.lww_winner("users", key)
            assert winner is not None, (key, value, millis)
            assert (winner.ts.millis, winner.ts.counter) >= (millis, 0), (key, winner, value)

    def teardown(self) -> None:
        if self.writer is not None:
            set_immutable(journal_files(self.data), False)
            self.writer.close()


PersistedAcks.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_persisted_acks_survive_failed_commits_resends_and_crashes() -> None:
    need_root()
    PersistedAcks.TestCase().runTest()
