"""Full-text search over TopGun maps, without sockets: BM25 order, limits, live updates, and
the index rebuilt from the journal's records after a restart."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.crdt.op import OpRecord
from octosync.store.records import KIND_OP, EncodedRecord, decode_record
from octosync.topgun import TopGunCore
from octosync.topgun.search import COMMIT_GAP_MS, MAX_QUERY_CHARS, text_of, tokens
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, follow, put, sent

require_module("tantivy", "the search extra")

DOCS = {
    "d1": {"title": "Rust and Python", "body": "python python python"},
    "d2": {"title": "Only rust here", "body": "systems"},
    "d3": {"title": "Cooking", "tags": ["pasta", {"deep": "python"}]},
    "d4": {"title": "Gardening", "body": "nothing to see"},
}


def searchable(records: list[EncodedRecord] | None = None) -> TopGunCore:
    c = TopGunCore(Clock(), persistent=True, search_maps=("users",))
    if records is not None:
        decoded = [decode_record(KIND_OP, e.body, seq=i + 1) for i, e in enumerate(records)]
        c.load(r for r in decoded if isinstance(r, OpRecord))
    c.connect(1, ALL)
    return c


def write(c: TopGunCore, docs: dict[str, Any], first_id: int = 1) -> list[EncodedRecord]:
    ops = [
        put(str(first_id + i), k, v, 100 + first_id + i) for i, (k, v) in enumerate(docs.items())
    ]
    return c.handle(1, batch(*ops)).records


def behind(c: TopGunCore) -> bool:
    """Some write is not searchable yet (the index watermark is below the last write)."""
    return c.index_feed.indexed < c.index_feed.written


def search(c: TopGunCore, text: str, **options: Any) -> sv.SearchRespPayload:
    opts = sv.SearchOptions(**options) if options else None
    (resp,) = sent(c.handle(1, sv.Search(sv.SearchPayload("r", "users", text, opts))), 1)
    assert isinstance(resp, sv.SearchResp)
    return resp.payload


def test_text_is_every_string_of_the_value() -> None:
    assert sorted(tokens(text_of(DOCS["d3"]))) == ["cooking", "pasta", "python"]


def test_bm25_ranks_the_denser_match_first_and_names_matched_terms() -> None:
    c = searchable()
    write(c, DOCS)
    got = search(c, "python")
    assert [r.key for r in got.results] == ["d1", "d3"]
    assert got.results[0].score > got.results[1].score > 0
    assert got.total_count == 2
    assert got.results[0].matched_terms == ["python"]
    value = msgspec.msgpack.decode(bytes(got.results[0].value))
    assert value == DOCS["d1"]
    both = search(c, "rust python")
    assert [r.key for r in both.results][:1] == ["d1"]
    assert set(both.results[0].matched_terms) == {"rust", "python"}


def test_limit_and_min_score() -> None:
    c = searchable()
    write(c, DOCS)
    assert [r.key for r in search(c, "python", limit=1).results] == ["d1"]
    top = search(c, "python").results[0].score
    assert [r.key for r in search(c, "python", min_score=top).results] == ["d1"]
    assert search(c, "python", min_score=top + 1).results == []


def test_a_write_is_searchable_at_once_and_a_removed_record_is_gone() -> None:
    c = searchable()
    write(c, DOCS)
    write(c, {"d4": {"title": "python gardening"}}, first_id=10)
    assert "d4" in [r.key for r in search(c, "python").results]
    c.handle(1, batch(put("20", "d1", None, 500)))
    assert "d1" not in [r.key for r in search(c, "python").results]


def test_a_map_without_an_index_and_a_long_query_are_refused_in_the_response() -> None:
    c = searchable()
    (resp,) = sent(c.handle(1, sv.Search(sv.SearchPayload("r9", "other", "x"))), 1)
    assert isinstance(resp, sv.SearchResp)
    assert resp.payload.request_id == "r9"
    assert resp.payload.error is not None
    assert "FeatureDisabled" in resp.payload.error
    long = search(c, "x" * (MAX_QUERY_CHARS + 1))
    assert long.error is not None
    assert "LimitExceeded" in long.error


def test_the_index_is_rebuilt_from_the_journal_after_a_restart() -> None:
    c = searchable()
    records = write(c, DOCS)
    records += c.handle(1, batch(put("30", "d2", None, 900))).records
    before = [(r.key, r.score) for r in search(c, "rust python").results]
    again = searchable(records)
    assert [(r.key, r.score) for r in search(again, "rust python").results] == before
    assert "d2" not in dict(before)


def test_live_search_enters_updates_and_leaves() -> None:
    c = searchable()
    write(c, {"a": {"t": "python"}})
    sub = sv.SearchSub(sv.SearchSubPayload("s1", "users", "python"))
    (first,) = sent(c.handle(1, sub), 1)
    assert isinstance(first, sv.SearchResp)
    assert first.payload.request_id == "s1"
    assert [r.key for r in first.payload.results] == ["a"]

    def updates() -> list[tuple[str, str]]:
        assert isinstance(c.clock, Clock)
        c.clock.now += COMMIT_GAP_MS  # an index commits at most this often
        got = [m for m in sent(c.flush(), 1) if isinstance(m, sv.SearchUpdate)]
        return [(m.payload.key, m.payload.change_type) for m in got]

    write(c, {"b": {"t": "python python"}}, first_id=2)
    entered = updates()
    assert ("b", "ENTER") in entered  # and a's score moved with the corpus (BM25's idf)
    assert all(kind != "LEAVE" for _, kind in entered)
    write(c, {"a": {"t": "python and more python"}}, first_id=3)
    assert ("a", "UPDATE") in updates()
    write(c, {"b": {"t": "gone"}}, first_id=4)
    assert ("b", "LEAVE") in updates()
    c.handle(1, sv.SearchUnsub(sv.SubscriptionId("s1")))
    write(c, {"c": {"t": "python"}}, first_id=5)
    assert updates() == []


WORDS = st.sampled_from(["python", "rust", "go", "java"])


class LiveSearchMachine(RuleBasedStateMachine):
    """A client applying every SEARCH_UPDATE holds what a fresh search would return."""

    def __init__(self) -> None:
        super().__init__()
        self.core = searchable()
        self.core.connect(2, ALL)
        self.next_id = 1
        sub = sv.SearchSub(sv.SearchSubPayload("s", "users", "python", sv.SearchOptions(limit=3)))
        (resp,) = sent(self.core.handle(2, sub), 2)
        assert isinstance(resp, sv.SearchResp)
        self.view = {r.key: r.score for r in resp.payload.results}

    @rule(key=st.sampled_from("abcdef"), words=st.lists(WORDS, min_size=1, max_size=4))
    def put(self, key: str, words: list[str]) -> None:
        self.next_id += 1
        self.core.handle(
            1, batch(put(str(self.next_id), key, {"t": " ".join(words)}, self.next_id))
        )

    @rule(key=st.sampled_from("abcdef"))
    def remove(self, key: str) -> None:
        self.next_id += 1
        self.core.handle(1, batch(put(str(self.next_id), key, None, self.next_id)))

    @rule()
    def flush(self) -> None:
        assert isinstance(self.core.clock, Clock)
        self.core.clock.now += COMMIT_GAP_MS
        follow(self.view, sent(self.core.flush(), 2))

    @invariant()
    def view_is_a_fresh_search_after_a_flush(self) -> None:
        if behind(self.core):
            return
        fresh = search(self.core, "python", limit=3)
        assert self.view == {r.key: r.score for r in fresh.results}


TestLiveSearch = LiveSearchMachine.TestCase
TestLiveSearch.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


def test_a_query_message_is_decoded_strictly() -> None:
    raw = msgspec.msgpack.encode({"type": "SEARCH", "payload": {"requestId": "r", "mapName": "m"}})
    with pytest.raises(Exception, match="query"):
        tg.decode(raw)


def test_commits_are_spaced_and_a_flush_commits_once_the_gap_passed() -> None:
    c = searchable()
    write(c, {"a": {"t": "python"}})
    assert [r.key for r in search(c, "python").results] == ["a"]  # the first commit
    write(c, {"b": {"t": "python"}}, first_id=2)
    c.flush()
    assert behind(c)  # within the gap: not committed, the server flushes again
    assert c.has_pending_events()
    assert [r.key for r in search(c, "python").results] == ["a"]
    assert isinstance(c.clock, Clock)
    c.clock.now += COMMIT_GAP_MS
    c.flush()
    assert not behind(c)
    assert sorted(r.key for r in search(c, "python").results) == ["a", "b"]
