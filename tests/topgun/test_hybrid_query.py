"""Hybrid queries without sockets: full-text predicates (match, matchPhrase, matchPrefix) on
one attribute, combined with the other predicates; refusals in the request's own response;
live deltas that keep a client's view equal to a fresh query."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.errors import OctosyncError
from octosync.topgun import TopGunCore, hybrid_query
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, put, sent

require_module("tantivy", "the search extra")

DOCS = {
    "a": {"title": "python tips", "body": "more python and python", "year": 2020},
    "b": {"title": "rust and python", "body": "a systems language", "year": 2024},
    "c": {"title": "rust only", "body": "python is elsewhere", "year": 2024},
    "d": {"title": "machine learning in python", "body": "", "year": 2023},
}


def core(docs: dict[str, Any] = DOCS, search: tuple[str, ...] = ("docs",)) -> TopGunCore:
    c = TopGunCore(Clock(), persistent=True, search_maps=search)
    c.connect(1, ALL)
    ops = [put(str(i), k, v, 100 + i, map_name="docs") for i, (k, v) in enumerate(docs.items(), 1)]
    if ops:
        c.handle(1, batch(*ops))
    return c


def raw(value: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.msgpack.encode(value))


def match(attribute: str, query: str, **options: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"op": "match", "attribute": attribute, "query": query}
    if options:
        node["matchOptions"] = options
    return node


def subscribe(c: TopGunCore, predicate: Any, sub: str = "s", conn: int = 1, **kw: Any) -> Any:
    fields = {k: raw(v) if k in ("where", "sort", "cursor") else v for k, v in kw.items()}
    p = rq.HybridQuerySubscribePayload(sub, "docs", predicate=raw(predicate), **fields)
    (resp,) = sent(c.handle(conn, rq.HybridQuerySubscribe(p)), conn)
    assert isinstance(resp, rq.HybridQueryResp), resp
    assert resp.payload.subscription_id == sub
    return resp.payload


def keys(payload: Any) -> list[str]:
    return [r.key for r in payload.results]


def test_a_match_on_one_attribute_combined_with_a_comparison() -> None:
    c = core()
    newer = {"op": "gte", "attribute": "year", "value": 2023}
    got = subscribe(c, {"op": "and", "children": [match("title", "python"), newer]})
    assert got.error is None
    assert set(keys(got)) == {"b", "d"}  # c says python only in its body; a is older
    assert all(r.score > 0 for r in got.results)
    assert all(r.matched_terms == ["python"] for r in got.results)
    assert msgspec.msgpack.decode(bytes(got.results[0].value)) == DOCS[got.results[0].key]
    scores = [r.score for r in got.results]
    assert scores == sorted(scores, reverse=True)  # best first without a sort
    assert got.has_more is False


def test_phrase_prefix_and_every_word() -> None:
    c = core()
    phrase = {"op": "matchPhrase", "attribute": "title", "query": "machine learning"}
    assert keys(subscribe(c, phrase)) == ["d"]
    loose = {"op": "matchPhrase", "attribute": "title", "query": "machine python", "slop": 2}
    assert keys(subscribe(c, loose)) == ["d"]
    assert keys(subscribe(c, {**loose, "slop": 1})) == []
    prefix = subscribe(c, {"op": "matchPrefix", "attribute": "title", "prefix": "Ru"})
    assert sorted(keys(prefix)) == ["b", "c"]
    assert all(r.matched_terms == ["rust"] for r in prefix.results)
    both = subscribe(c, match("title", "rust python", operator="and"))
    assert keys(both) == ["b"]
    assert sorted(keys(subscribe(c, match("title", "rust python")))) == ["a", "b", "c", "d"]


def test_full_text_under_or_and_not_reads_the_map_and_scores_only_what_it_matched() -> None:
    c = core()
    old = {"op": "lt", "attribute": "year", "value": 2021}
    either = subscribe(c, {"op": "or", "children": [match("title", "machine"), old]})
    assert sorted(keys(either)) == ["a", "d"]
    by_key = {r.key: r for r in either.results}
    assert by_key["a"].score == 0.0  # matched by the comparison alone
    assert by_key["a"].matched_terms == []
    assert by_key["d"].score > 0
    without = subscribe(c, {"op": "not", "children": [match("title", "rust")]})
    assert sorted(keys(without)) == ["a", "d"]
    assert all(r.score == 0.0 for r in without.results)


def test_where_sort_and_limit() -> None:
    c = core()
    got = subscribe(c, match("body", "python"), where={"year": 2024})
    assert keys(got) == ["c"]
    ordered = subscribe(c, match("title", "python rust"), sort={"_key": "desc"}, limit=2)
    assert keys(ordered) == ["d", "c"]
    assert ordered.has_more is True
    by_year = subscribe(c, match("title", "python"), sort=[{"field": "year", "direction": "asc"}])
    assert keys(by_year) == ["a", "d", "b"]


@pytest.mark.parametrize(
    ("predicate", "kw", "code", "path"),
    [
        ({"op": "fuzzy", "attribute": "t"}, {}, "DECODE_ERROR", "payload.predicate.op"),
        ({"op": "match", "attribute": "title"}, {}, "DECODE_ERROR", "payload.predicate.query"),
        (match("title", "!!"), {}, "DECODE_ERROR", "payload.predicate.query"),
        (match("title", "x" * 1025), {}, "LIMIT_EXCEEDED", "payload.predicate.query"),
        (
            {"op": "matchPrefix", "attribute": "t", "prefix": "a b"},
            {},
            "DECODE_ERROR",
            "payload.predicate.prefix",
        ),
        (match("title", "python"), {"cursor": "abc"}, "FEATURE_DISABLED", "payload.cursor"),
        (match("title", "python"), {"limit": 101}, "LIMIT_EXCEEDED", "payload.limit"),
        (
            {"op": "or", "children": [match("title", str(i)) for i in range(5)]},
            {},
            "LIMIT_EXCEEDED",
            "payload.predicate.children[4]",
        ),
    ],
)
def test_a_refusal_is_the_subscriptions_own_response(
    predicate: Any, kw: dict[str, Any], code: str, path: str
) -> None:
    c = core()
    got = subscribe(c, predicate, sub="refused", **kw)
    assert got.code == code
    assert got.results == []
    assert got.error is not None
    assert c.hybrid_queries.any() is False
    fields = {k: raw(v) if k == "cursor" else v for k, v in kw.items()}
    p = rq.HybridQuerySubscribePayload("refused", "docs", predicate=raw(predicate), **fields)
    with pytest.raises(OctosyncError) as info:
        hybrid_query.parse(p, c.search)
    assert info.value.path == path


def test_a_map_without_a_full_text_index_is_answered_feature_disabled() -> None:
    c = core(search=("other",))
    got = subscribe(c, match("title", "python"), sub="q9")
    assert got.code == "FEATURE_DISABLED"
    assert got.error is not None
    assert "topgun_search" in got.error


def test_unsubscribe_and_disconnect_end_the_deltas() -> None:
    c = core()
    assert isinstance(c.clock, Clock)
    c.connect(2, ALL)
    c.connect(3, ALL)
    subscribe(c, match("title", "python"), sub="s1", conn=2)
    subscribe(c, match("title", "python"), sub="s2", conn=2)
    subscribe(c, match("title", "python"), sub="s3", conn=3)
    c.handle(2, rq.HybridQueryUnsubscribe(rq.HybridSubscriptionId("s1")))
    c.disconnect(3)
    c.handle(1, batch(put("50", "e", {"title": "python again"}, 500, map_name="docs")))
    c.clock.now += 1_000  # past the commit gap
    deltas = [m.payload for m in sent(c.flush(), 2) if isinstance(m, rq.HybridQueryDelta)]
    assert ("s2", "e", "ENTER") in {(d.subscription_id, d.key, d.type) for d in deltas}
    assert {d.subscription_id for d in deltas} == {"s2"}


TITLES = st.lists(st.sampled_from(["python", "rust", "go", "notes"]), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(
    docs=st.dictionaries(
        st.sampled_from("abcdefgh"),
        st.tuples(TITLES, TITLES, st.integers(2020, 2024)),
        max_size=8,
    ),
    word=st.sampled_from(["python", "rust", "go"]),
    year=st.integers(2020, 2025),
    negate=st.booleans(),
)
def test_the_rows_are_the_records_the_predicate_picks_on_their_own_attribute(
    docs: dict[str, tuple[list[str], list[str], int]], word: str, year: int, negate: bool
) -> None:
    values = {
        k: {"title": " ".join(t), "body": " ".join(b), "year": y} for k, (t, b, y) in docs.items()
    }
    c = core(values)
    text: dict[str, Any] = match("title", word)
    if negate:
        text = {"op": "not", "children": [text]}
    newer = {"op": "gte", "attribute": "year", "value": year}
    got = subscribe(c, {"op": "and", "children": [text, newer]})
    expected = {k for k, (t, _b, y) in docs.items() if (word in t) != negate and y >= year}
    assert set(keys(got)) == expected
    for r in got.results:
        assert (r.score > 0) == (not negate)
        assert r.matched_terms == ([] if negate else [word])


WORDS = st.sampled_from(["python", "rust", "go"])
PREDICATE = {
    "op": "and",
    "children": [match("title", "python"), {"op": "gte", "attribute": "year", "value": 2022}],
}


class LiveHybridQueryMachine(RuleBasedStateMachine):
    """A client applying every HYBRID_QUERY_DELTA holds what a fresh subscription returns."""

    def __init__(self) -> None:
        super().__init__()
        self.core = core({})
        assert isinstance(self.core.clock, Clock)
        self.clock = self.core.clock
        self.core.connect(2, ALL)
        self.n = 10
        first = subscribe(self.core, PREDICATE, sub="live", conn=2, limit=3)
        self.view = {r.key: (r.score, r.matched_terms) for r in first.results}

    @rule(
        key=st.sampled_from("abcde"),
        words=st.lists(WORDS, min_size=1, max_size=3),
        year=st.integers(2020, 2024),
    )
    def write(self, key: str, words: list[str], year: int) -> None:
        self.n += 1
        value = {"title": " ".join(words), "year": year}
        self.core.handle(1, batch(put(str(self.n), key, value, self.n, map_name="docs")))
        self.flush()

    @rule(key=st.sampled_from("abcde"))
    def remove(self, key: str) -> None:
        self.n += 1
        self.core.handle(1, batch(put(str(self.n), key, None, self.n, map_name="docs")))
        self.flush()

    def flush(self) -> None:
        self.clock.now += 1_000  # past the commit gap: the write is committed, the query re-run
        for m in sent(self.core.flush(), 2):
            assert not isinstance(m, tg.Error), m
            if isinstance(m, rq.HybridQueryDelta):
                p = m.payload
                if p.type == "LEAVE":
                    del self.view[p.key]
                else:
                    self.view[p.key] = (p.score, p.matched_terms)

    @invariant()
    def view_is_a_fresh_query(self) -> None:
        fresh = subscribe(self.core, PREDICATE, sub="fresh", limit=3)
        assert self.view == {r.key: (r.score, r.matched_terms) for r in fresh.results}


TestLiveHybridQuery = LiveHybridQueryMachine.TestCase
TestLiveHybridQuery.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
