"""Indexing off the caller's thread (``index_inline=False``): batches taken from the feed, run
by the indexer on a thread of its own, published back; searches read the last publish, live
searches follow it in order, and a failed batch is indexed again."""

from __future__ import annotations

import threading

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.topgun import TopGunCore
from octosync.topgun.index_feed import IndexBatch
from octosync.topgun.indexer import Indexed
from octosync.topgun.search import COMMIT_GAP_MS
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, follow, put, sent

require_module("tantivy", "the search extra")


def offloaded() -> TopGunCore:
    c = TopGunCore(Clock(), persistent=True, search_maps=("users",), index_inline=False)
    c.connect(1, ALL)
    c.connect(2, ALL)
    return c


def on_a_thread(c: TopGunCore, b: IndexBatch) -> Indexed:
    """What the server's indexer thread does with a batch."""
    out: list[Indexed] = []
    worker = threading.Thread(target=lambda: out.append(c.indexer.run(b, True)))
    worker.start()
    worker.join()
    return out[0]


def keys(c: TopGunCore, text: str) -> list[str]:
    (resp,) = sent(c.handle(1, sv.Search(sv.SearchPayload("r", "users", text))), 1)
    assert isinstance(resp, sv.SearchResp)
    return [r.key for r in resp.payload.results]


def test_a_write_is_searchable_once_its_batch_is_published() -> None:
    c = offloaded()
    c.handle(1, batch(put("1", "a", {"t": "python"}, 100)))
    c.flush()
    assert not c.has_pending_events()  # the flush does not index: the indexer thread does
    assert keys(c, "python") == []  # not searchable before the indexer ran
    assert c.index_due_in() == 0
    taken = c.take_index_batch()
    assert taken is not None
    assert c.index_due_in() is None  # one batch at a time
    c.handle(1, batch(put("2", "b", {"t": "python"}, 101)))
    c.indexed(on_a_thread(c, taken))
    assert keys(c, "python") == ["a"]
    assert (c.index_feed.indexed, c.index_feed.written) == (1, 2)
    assert c.index_due_in() == COMMIT_GAP_MS  # the next batch waits for the commit gap
    assert isinstance(c.clock, Clock)
    c.clock.now += COMMIT_GAP_MS
    again = c.take_index_batch()
    assert again is not None
    c.indexed(on_a_thread(c, again))
    assert sorted(keys(c, "python")) == ["a", "b"]
    assert c.index_feed.indexed == c.index_feed.written


def test_a_failed_batch_is_taken_again_with_the_newest_values() -> None:
    c = offloaded()
    c.handle(1, batch(put("1", "a", {"t": "python"}, 100)))
    taken = c.take_index_batch()
    assert taken is not None
    c.handle(1, batch(put("2", "a", {"t": "rust"}, 101)))
    c.index_failed(taken)
    assert c.index_feed.indexed == 0
    assert c.take_index_batch() is None  # a retry waits for the gap: no busy loop of failures
    assert isinstance(c.clock, Clock)
    c.clock.now += COMMIT_GAP_MS
    retry = c.take_index_batch()
    assert retry is not None
    assert [(r.key, r.value) for r in retry.rows] == [("a", c.value_of("users", "a"))]
    c.indexed(on_a_thread(c, retry))
    assert keys(c, "python") == []
    assert keys(c, "rust") == ["a"]


WORDS = st.sampled_from(["python", "rust", "go"])


class OffloadedSearchMachine(RuleBasedStateMachine):
    """Writes and indexer steps interleaved in any order: a client applying every
    SEARCH_UPDATE holds what a fresh search returns, and once the watermark reaches the last
    write, a fresh search is what the maps hold."""

    def __init__(self) -> None:
        super().__init__()
        self.core = offloaded()
        self.n = 10
        self.taken: IndexBatch | None = None
        sub = sv.SearchSub(sv.SearchSubPayload("s", "users", "python", sv.SearchOptions(limit=3)))
        (resp,) = sent(self.core.handle(2, sub), 2)
        assert isinstance(resp, sv.SearchResp)
        self.view: dict[str, float] = {}

    @rule(key=st.sampled_from("abcde"), words=st.lists(WORDS, min_size=1, max_size=3))
    def write(self, key: str, words: list[str]) -> None:
        self.n += 1
        self.core.handle(1, batch(put(str(self.n), key, {"t": " ".join(words)}, self.n)))

    @rule(key=st.sampled_from("abcde"))
    def remove(self, key: str) -> None:
        self.n += 1
        self.core.handle(1, batch(put(str(self.n), key, None, self.n)))

    @precondition(lambda self: self.taken is None)
    @rule()
    def take(self) -> None:
        assert isinstance(self.core.clock, Clock)
        self.core.clock.now += COMMIT_GAP_MS
        self.taken = self.core.take_index_batch()

    @precondition(lambda self: self.taken is not None)
    @rule()
    def publish(self) -> None:
        assert self.taken is not None
        done = on_a_thread(self.core, self.taken)
        self.taken = None
        follow(self.view, sent(self.core.indexed(done), 2))

    @invariant()
    def once_caught_up_the_view_is_a_fresh_search_of_the_maps(self) -> None:
        feed = self.core.index_feed
        if feed.indexed < feed.written:
            return
        (resp,) = sent(self.core.handle(2, search_message()), 2)
        assert isinstance(resp, sv.SearchResp)
        fresh = {r.key: r.score for r in resp.payload.results}
        assert self.view == fresh
        live = self.core.maps.live_items("users")
        holds = {k for k, v in live.items() if b"python" in v}
        assert set(fresh) <= holds
        assert len(fresh) == min(3, len(holds))


def search_message() -> tg.Message:
    return sv.Search(sv.SearchPayload("f", "users", "python", sv.SearchOptions(limit=3)))


TestOffloadedSearch = OffloadedSearchMachine.TestCase
TestOffloadedSearch.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
