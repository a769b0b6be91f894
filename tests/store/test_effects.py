"""The lease and the idempotency records in the journal's file, with an injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from octosync.effects.ledger import Decision, State
from octosync.errors import LeaseLost
from octosync.store.effects import JournalEffects
from octosync.store.journal import Journal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_records_and_fencing_across_two_connections(tmp_path: Path) -> None:
    clock = Clock()
    one = JournalEffects(tmp_path, clock=clock)
    two = JournalEffects(tmp_path, clock=clock)  # another process, as SQLite sees it
    a = one.acquire("a", 5.0)
    assert a is not None
    assert two.acquire("b", 5.0) is None
    assert one.begin(a, "k1") is Decision.FIRE
    one.done(a, "k1")
    assert one.begin(a, "k1") is Decision.SKIP
    assert one.begin(a, "k2") is Decision.FIRE  # a "pauses" here, before firing
    clock.now += 6.0
    b = two.acquire("b", 5.0)
    assert b is not None
    assert b.token == a.token + 1
    with pytest.raises(LeaseLost):
        one.done(a, "k2")  # the paused holder can no longer record anything
    with pytest.raises(LeaseLost):
        one.begin(a, "k3")
    assert two.begin(b, "k2") is Decision.IN_DOUBT
    two.retry(b, "k2")
    two.done(b, "k2")
    assert (two.count(State.DONE), two.count(State.INTENT)) == (2, 0)
    one.close()
    two.close()


def test_the_tables_live_in_the_journal_file_beside_its_log(tmp_path: Path) -> None:
    effects = JournalEffects(tmp_path)
    lease = effects.acquire("a", 5.0)
    assert lease is not None
    effects.begin(lease, "k")
    effects.close()
    journal = Journal(tmp_path)  # the journal opens the same file and still works
    assert journal.latest_seq() == 0
    journal.close()
    again = JournalEffects(tmp_path)
    assert again.count(State.INTENT) == 1
    released = again.acquire("a", 5.0)
    assert released is not None
    again.release(released)
    assert again.acquire("b", 5.0) is not None  # released: the next holder at once
    again.close()
