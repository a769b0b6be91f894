"""The index feed: written keys coalesced per key, taken in order, and a watermark that never
claims a write is searchable before it (or a later write of its key) is."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.topgun.index_feed import IndexBatch, IndexFeed

KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f"])
VALUES = st.one_of(st.none(), st.binary(min_size=1, max_size=3))


class FeedMachine(RuleBasedStateMachine):
    """An index fed by the batches holds, for every write up to the watermark, that write's
    value or a later one of its key; once the feed is idle, exactly the maps' values."""

    def __init__(self) -> None:
        super().__init__()
        self.feed = IndexFeed(max_batch=3)
        self.writes: list[tuple[str, str, bytes | None]] = []
        """Every write, numbered from 1 by its position."""
        self.staged: dict[tuple[str, str], bytes | None] = {}
        """What the index holds, committed or not."""
        self.index: dict[tuple[str, str], bytes | None] = {}
        """What searches see (the last publish)."""
        self.batch: IndexBatch | None = None

    @rule(m=st.sampled_from(["m1", "m2"]), key=KEYS, value=VALUES)
    def write(self, m: str, key: str, value: bytes | None) -> None:
        self.writes.append((m, key, value))
        assert self.feed.put(m, key, value) == len(self.writes)

    @precondition(lambda self: self.batch is None)
    @rule()
    def take(self) -> None:
        self.batch = self.feed.take()
        if self.batch is not None:
            assert 0 < len(self.batch.rows) <= self.feed.max_batch
            assert len({(r.map, r.key) for r in self.batch.rows}) == len(self.batch.rows)
            assert self.feed.take() is None  # one batch at a time

    @precondition(lambda self: self.batch is not None)
    @rule()
    def apply(self) -> None:
        assert self.batch is not None
        for row in self.batch.rows:
            self.staged[(row.map, row.key)] = row.value
        self.feed.done(self.batch)
        self.batch = None

    @precondition(lambda self: self.batch is not None)
    @rule()
    def fail(self) -> None:
        assert self.batch is not None
        self.feed.failed(self.batch)
        self.batch = None

    @rule()
    def commit(self) -> None:
        self.index = dict(self.staged)
        self.feed.published()

    @invariant()
    def at_most_one_entry_per_key(self) -> None:
        assert len(self.feed) <= len({(m, k) for m, k, _ in self.writes})

    @invariant()
    def the_watermark_holds(self) -> None:
        mark = self.feed.indexed
        assert 0 <= mark <= self.feed.written == len(self.writes)
        for n, (m, key, value) in enumerate(self.writes[:mark], start=1):
            later = [v for mm, kk, v in self.writes[n - 1 :] if (mm, kk) == (m, key)]
            assert self.index.get((m, key)) in later
            assert value in later

    @invariant()
    def an_idle_committed_feed_is_the_maps(self) -> None:
        if self.feed.idle() and self.feed.indexed == self.feed.written:
            latest = {(m, k): v for m, k, v in self.writes}
            assert {k: v for k, v in self.index.items() if k in latest} == latest


TestFeed = FeedMachine.TestCase
TestFeed.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_a_key_written_again_keeps_its_place_with_the_newer_value() -> None:
    feed = IndexFeed(max_batch=1)
    feed.put("m", "a", b"1")
    feed.put("m", "b", b"2")
    feed.put("m", "a", b"3")
    first = feed.take()
    assert first is not None
    assert [(r.key, r.value) for r in first.rows] == [("a", b"3")]
    assert first.through == 1  # b (write 2) is not in it; a's later write 3 is
    feed.done(first)
    feed.published()
    assert feed.indexed == 1


def test_only_the_batch_taken_can_be_done() -> None:
    feed = IndexFeed()
    feed.put("m", "a", None)
    assert feed.take() is not None
    with pytest.raises(ValueError, match="not the batch"):
        feed.done(IndexBatch((), 1))
