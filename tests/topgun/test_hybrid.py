"""Hybrid search without sockets: reciprocal-rank fusion of exact, full-text and semantic
ranks, predicates, and live updates that keep a client's view equal to a fresh search."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.topgun import TopGunCore
from octosync.topgun.hybrid import RRF_K
from octosync.wire import topgun_requests as rq
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, put, sent

require_module("usearch", "the vector extra")
require_module("tantivy", "the search extra")

DOCS = {
    "a": {"t": "python python python", "year": 2020},
    "b": {"t": "python and rust", "year": 2024},
    "c": {"t": "rust only", "year": 2024},
}


def core(docs: dict[str, Any] = DOCS) -> TopGunCore:
    c = TopGunCore(Clock(), persistent=True, vector_maps=("docs",), search_maps=("docs",))
    c.connect(1, ALL)
    ops = [put(str(i), k, v, 100 + i, map_name="docs") for i, (k, v) in enumerate(docs.items(), 1)]
    c.handle(1, batch(*ops))
    return c


def hybrid(c: TopGunCore, text: str, methods: list[Any], k: int = 10, **kw: Any) -> Any:
    if "predicate" in kw:
        kw["predicate"] = msgspec.Raw(msgspec.msgpack.encode(kw["predicate"]))
    p = rq.HybridSearchPayload("docs", text, methods, k, request_id="h", **kw)
    (resp,) = sent(c.handle(1, rq.HybridSearch(p)), 1)
    assert isinstance(resp, rq.HybridSearchResp)
    return resp.payload


def test_fusion_adds_one_over_sixty_plus_rank_per_method() -> None:
    c = core()
    got = hybrid(c, "python", ["fullText", "exact"])
    keys = [r.key for r in got.results]
    assert keys == ["a", "b"]  # both methods: a ranks first by BM25, then by key
    assert got.results[0].score == pytest.approx(2 / (RRF_K + 1))
    assert got.results[1].score == pytest.approx(2 / (RRF_K + 2))
    assert set(got.results[0].method_scores) == {"fullText", "exact"}
    assert got.results[0].method_scores["exact"] == 1.0


def test_semantic_ranks_by_the_embedding_of_the_query_text() -> None:
    c = core()
    got = hybrid(c, "rust only", ["semantic"], k=1, include_value=True)
    assert [r.key for r in got.results] == ["c"]
    assert msgspec.msgpack.decode(bytes(got.results[0].value)) == DOCS["c"]


def test_a_predicate_is_the_exact_method_and_filters_the_others() -> None:
    c = core()
    newer = {"op": "gte", "attribute": "year", "value": 2024}
    got = hybrid(c, "python", ["fullText", "exact"], predicate=newer)
    assert [r.key for r in got.results] == ["b", "c"]  # b: both methods, c: exact only
    assert "fullText" not in got.results[1].method_scores


def test_min_score_k_and_an_unindexed_method_are_applied() -> None:
    c = core()
    assert len(hybrid(c, "python", ["fullText", "exact"], k=1).results) == 1
    between = (2 / (RRF_K + 1) + 2 / (RRF_K + 2)) / 2  # a's fused score and b's
    only_both = hybrid(c, "python", ["fullText", "exact"], min_score=between)
    assert [r.key for r in only_both.results] == ["a"]
    plain = TopGunCore(Clock(), persistent=True)
    plain.connect(1, ALL)
    refused = hybrid(plain, "python", ["fullText"])
    assert refused.error is not None
    assert "FeatureDisabled" in refused.error


WORDS = st.sampled_from(["python", "rust", "go"])


class LiveHybridMachine(RuleBasedStateMachine):
    """A client applying every HYBRID_SEARCH_UPDATE holds what a fresh search returns."""

    def __init__(self) -> None:
        super().__init__()
        self.core = core({})
        self.core.connect(2, ALL)
        self.n = 10
        sub = rq.HybridSearchSubPayload(
            "docs", "python", ["fullText", "exact"], 3, subscription_id="s"
        )
        (resp,) = sent(self.core.handle(2, rq.HybridSearchSub(sub)), 2)
        assert isinstance(resp, rq.HybridSearchResp)
        self.view = {r.key: r.score for r in resp.payload.results}

    @rule(key=st.sampled_from("abcde"), words=st.lists(WORDS, min_size=1, max_size=3))
    def write(self, key: str, words: list[str]) -> None:
        self.n += 1
        op = put(str(self.n), key, {"t": " ".join(words)}, self.n, map_name="docs")
        self.core.handle(1, batch(op))
        self.flush()

    @rule(key=st.sampled_from("abcde"))
    def remove(self, key: str) -> None:
        self.n += 1
        self.core.handle(1, batch(put(str(self.n), key, None, self.n, map_name="docs")))
        self.flush()

    def flush(self) -> None:
        for m in sent(self.core.flush(), 2):
            if isinstance(m, rq.HybridSearchUpdate):
                if m.payload.change_type == "LEAVE":
                    del self.view[m.payload.key]
                else:
                    self.view[m.payload.key] = m.payload.score

    @invariant()
    def view_is_a_fresh_search(self) -> None:
        fresh = hybrid(self.core, "python", ["fullText", "exact"], k=3)
        assert self.view == {r.key: r.score for r in fresh.results}


TestLiveHybrid = LiveHybridMachine.TestCase
TestLiveHybrid.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
