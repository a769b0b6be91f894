"""Vector search over TopGun maps, without sockets: the HNSW index against brute force, the
deterministic embedder, bounds, and the index rebuilt after a restart."""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.op import OpRecord
from octosync.store.records import KIND_OP, EncodedRecord, decode_record
from octosync.topgun import TopGunCore
from octosync.topgun.embedding import HashingEmbedder
from octosync.topgun.search import COMMIT_GAP_MS
from octosync.topgun.vectors import record_vector
from octosync.wire import topgun_requests as rq
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, put, sent

require_module("usearch", "the vector extra")

DIM = 64


def indexed(records: list[EncodedRecord] | None = None) -> TopGunCore:
    c = TopGunCore(Clock(), persistent=True, vector_maps=("docs",), search_maps=("docs",))
    if records is not None:
        decoded = [decode_record(KIND_OP, e.body, seq=i + 1) for i, e in enumerate(records)]
        c.load(r for r in decoded if isinstance(r, OpRecord))
    c.connect(1, ALL)
    return c


def fill(c: TopGunCore, docs: dict[str, Any]) -> list[EncodedRecord]:
    """Write ``docs`` and flush until every vector is indexed (a flush takes in a bounded
    number of them)."""
    ops = [put(str(i), k, v, 100 + i, map_name="docs") for i, (k, v) in enumerate(docs.items(), 1)]
    records = c.handle(1, batch(*ops)).records
    flushes = 0
    while c.has_pending_events():
        c.flush()
        flushes += 1
    assert flushes <= len(docs) // c.index_feed.max_batch + 1
    return records


def f32(vector: Any) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def nearest(c: TopGunCore, vector: Any, k: int, **options: Any) -> rq.VectorSearchRespPayload:
    opts = rq.VectorSearchOptions(**options) if options else None
    ask = rq.VectorSearch(rq.VectorSearchPayload("v", "docs", f32(vector), k, options=opts))
    (resp,) = sent(c.handle(1, ask), 1)
    assert isinstance(resp, rq.VectorSearchResp)
    return resp.payload


@given(st.text(min_size=1, max_size=60))
def test_the_embedding_is_deterministic_and_unit_length(text: str) -> None:
    one, two = HashingEmbedder(DIM).embed(text), HashingEmbedder(DIM).embed(text)
    assert one == two
    if one is not None:
        assert abs(sum(x * x for x in one) - 1.0) < 1e-9


def test_a_record_is_indexed_by_its_vector_field_or_its_text() -> None:
    e = HashingEmbedder(4)
    assert record_vector({"vector": [1, 2, 3, 4]}, e) == [1.0, 2.0, 3.0, 4.0]
    assert record_vector({"vector": f32([1, 0, 0, 0])}, e) == [1.0, 0.0, 0.0, 0.0]
    assert record_vector({"title": "hello"}, e) == e.embed("hello")
    assert record_vector({"n": 3}, e) is None


def test_hnsw_recall_at_10_against_brute_force() -> None:
    rng = np.random.default_rng(7)
    points = rng.standard_normal((2000, DIM)).astype(np.float32)
    c = indexed()
    fill(c, {f"p{i}": {"vector": [float(x) for x in p]} for i, p in enumerate(points)})
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    found = 0
    for q in rng.standard_normal((20, DIM)).astype(np.float32):
        truth = {f"p{i}" for i in np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10]}
        got = nearest(c, q, 10)
        assert got.total_candidates == 2000
        found += len(truth & {r.key for r in got.results})
    assert found / 200 >= 0.9


def test_scores_are_cosine_similarity_best_first_with_value_and_vector_on_request() -> None:
    c = indexed()
    fill(c, {"x": {"vector": [1.0] + [0.0] * 63}, "y": {"vector": [0.0, 1.0] + [0.0] * 62}})
    got = nearest(c, [1.0] + [0.0] * 63, 2, include_value=True, include_vectors=True)
    assert [r.key for r in got.results] == ["x", "y"]
    assert got.results[0].score == pytest.approx(1.0, abs=1e-5)
    assert got.results[1].score == pytest.approx(0.0, abs=1e-5)
    assert msgspec.msgpack.decode(bytes(got.results[0].value))["vector"][0] == 1.0
    assert got.results[0].vector == f32([1.0] + [0.0] * 63)
    assert [r.key for r in nearest(c, [1.0] + [0.0] * 63, 2, min_score=0.5).results] == ["x"]


def test_writes_move_the_index_and_a_restart_rebuilds_it() -> None:
    c = indexed()
    records = fill(c, {"a": {"t": "red apples"}, "b": {"t": "green pears"}})
    query = HashingEmbedder(DIM).embed("apples")
    assert nearest(c, query, 1).results[0].key == "a"
    records += c.handle(1, batch(put("9", "a", None, 900, map_name="docs"))).records
    assert [r.key for r in nearest(c, query, 2).results] == ["b"]
    again = indexed(records)
    assert [r.key for r in nearest(again, query, 2).results] == ["b"]


def test_bounds_and_a_wrong_dimension_are_refused_in_the_response() -> None:
    c = indexed()
    fill(c, {"a": {"t": "x"}})
    for vector, k in (([1.0] * 3, 1), ([1.0] * DIM, 0), ([1.0] * DIM, 5000)):
        got = nearest(c, vector, k)
        assert got.error is not None
        assert got.results == []


def test_a_flush_takes_in_a_bounded_batch_of_written_vectors() -> None:
    c = indexed()
    c.index_feed.max_batch = 50
    n = 2 * c.index_feed.max_batch + 10
    ops = [put(str(i), f"k{i}", {"t": f"word{i}"}, 100 + i, map_name="docs") for i in range(1, n)]
    c.handle(1, batch(*ops))
    c.flush()
    assert c.has_pending_events()  # the rest waits for the next turns
    first = nearest(c, HashingEmbedder(DIM).embed("word1") or [], 1).total_candidates
    assert first == 2 * c.index_feed.max_batch  # the search took in one more batch first
    while c.has_pending_events():
        assert isinstance(c.clock, Clock)
        c.clock.now += COMMIT_GAP_MS  # the last batches wait for the full-text commit
        c.flush()
    assert nearest(c, HashingEmbedder(DIM).embed("word1") or [], 1).total_candidates == n - 1
