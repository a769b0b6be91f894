"""``VECTOR_SEARCH``, and ``HYBRID_SEARCH`` with its live form fusing ranks (sans-I/O).

Hybrid search ranks a map's records by each requested method and fuses the ranks by
reciprocal-rank fusion (each method adds ``1 / (60 + rank)``, rank from 1):

- ``fullText``: BM25 over the map's full-text index (``topgun.search``);
- ``semantic``: cosine similarity over its vector index (``topgun.vectors``), to
  ``queryVector`` or, without one, to the embedding of ``queryText``;
- ``exact``: records that satisfy ``predicate`` (TopGun's predicate tree, as live queries read
  it) or, without one, whose text holds ``queryText`` (case-insensitive), ranked by key. It
  reads the whole map, so it is refused on a map above :data:`MAX_EXACT_SCAN` records.

A ``predicate`` also filters the other methods' hits. ``methodScores`` carries each method's
own score (BM25, cosine, 1 for an exact match); ``minScore`` applies to the fused score; ``k``
results come back. A method the map has no index for is refused (``FeatureDisabled``).

A live hybrid search (``HYBRID_SEARCH_SUB``) is run again after each flush that changed its
map, and the difference goes out as ``HYBRID_SEARCH_UPDATE`` (``ENTER``/``UPDATE``/``LEAVE``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from octosync.crdt.sync_messages import NIL
from octosync.errors import DecodeError, FeatureDisabled, LimitExceeded
from octosync.topgun.live_table import LiveTable
from octosync.topgun.queries import _check, matches
from octosync.topgun.search import MAX_QUERY_CHARS, FullText, Values, text_of
from octosync.topgun.vectors import VectorIndexes, query_vector
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv

RRF_K = 60
MAX_HYBRID_K = 100
"""Results per hybrid search (each method ranks twice as many before the fusion)."""
MAX_EXACT_SCAN = 20_000
MAX_LIVE_PER_CONNECTION = 64
_DEC = msgspec.msgpack.Decoder()

Items = Callable[[str], Mapping[str, bytes]]
"""A map's live values (key -> MsgPack bytes): read only by the exact method."""

Hit = tuple[str, float, dict[rq.SearchMethod, float]]
"""(key, fused score, per-method scores)."""


def vector_search(
    vectors: VectorIndexes, p: rq.VectorSearchPayload, values: Values
) -> rq.VectorSearchResp:
    vectors.require(p.map_name)
    raw = rq.vector_bytes(p.query_vector, "payload.queryVector")
    vector = query_vector(raw, vectors.embedder.dim, "payload.queryVector")
    ef = None if p.ef_search is None else int(p.ef_search)
    hits, size = vectors.nearest(p.map_name, vector, int(p.k), ef)
    opts = p.options or rq.VectorSearchOptions()
    if opts.min_score is not None:
        hits = [(k, s) for k, s in hits if s >= opts.min_score]
    if bytes(opts.filter) != bytes(NIL):
        predicate = _predicate(opts.filter, "payload.options.filter")
        hits = [(k, s) for k, s in hits if _passes(predicate, values(p.map_name, k))]
    results = []
    for key, score in hits:
        value = values(p.map_name, key) if opts.include_value else None
        vec = vectors.stored(p.map_name, key) if opts.include_vectors else None
        raw_value = NIL if value is None else msgspec.Raw(value)
        results.append(rq.VectorSearchResult(key, score, raw_value, vec))
    return rq.VectorSearchResp(rq.VectorSearchRespPayload(p.id, results, size, 0))


def _predicate(raw: msgspec.Raw, path: str) -> dict[str, Any]:
    node = _DEC.decode(bytes(raw))
    _check(node, path)
    assert isinstance(node, dict)
    return node


def _passes(predicate: dict[str, Any] | None, value: bytes | None) -> bool:
    if value is None:
        return False
    return predicate is None or matches(predicate, _DEC.decode(value))


def hybrid(
    fulltext: FullText,
    vectors: VectorIndexes,
    q: rq.HybridQuery,
    values: Values,
    items: Items,
) -> list[Hit]:
    """The fused ranking of ``q`` over its map, best first (ties by key)."""
    name = q.map_name
    k = int(q.k)
    if not 0 < k <= MAX_HYBRID_K:
        raise LimitExceeded(f"k must be 1..{MAX_HYBRID_K}", path="payload.k")
    if len(q.query_text) > MAX_QUERY_CHARS:
        raise LimitExceeded(
            f"a search query is at most {MAX_QUERY_CHARS} characters", path="payload.queryText"
        )
    if not q.methods:
        raise DecodeError("name at least one method", path="payload.methods")
    has_predicate = bytes(q.predicate) != bytes(NIL)
    predicate = _predicate(q.predicate, "payload.predicate") if has_predicate else None
    depth = 2 * k
    ranked: dict[rq.SearchMethod, list[tuple[str, float]]] = {}
    for method in dict.fromkeys(q.methods):
        if method == "fullText":
            if not fulltext.enabled(name):
                raise FeatureDisabled(
                    f"full-text search is not enabled for map {name!r} (topgun_search)",
                    path="payload.methods",
                )
            hits, _ = fulltext.top(name, q.query_text, depth, 0.0, values)
        elif method == "semantic":
            vectors.require(name)
            if q.query_vector is not None:
                raw = rq.vector_bytes(q.query_vector, "payload.queryVector")
                vector: list[float] | None = query_vector(
                    raw, vectors.embedder.dim, "payload.queryVector"
                )
            else:
                vector = vectors.embedder.embed(q.query_text)
            hits = [] if vector is None else vectors.nearest(name, vector, depth, None)[0]
        else:
            hits = _exact(name, q.query_text, predicate, items)[:depth]
        if predicate is not None and method != "exact":
            hits = [(key, s) for key, s in hits if _passes(predicate, values(name, key))]
        ranked[method] = hits
    fused: dict[str, float] = {}
    scores: dict[str, dict[rq.SearchMethod, float]] = {}
    for method, hits in ranked.items():
        for rank, (key, score) in enumerate(hits, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
            scores.setdefault(key, {})[method] = score
    min_score = q.min_score if q.min_score is not None else 0.0
    out = [(key, s, scores[key]) for key, s in fused.items() if s >= min_score]
    out.sort(key=lambda h: (-h[1], h[0]))
    return out[:k]


def _exact(
    name: str, text: str, predicate: dict[str, Any] | None, items: Items
) -> list[tuple[str, float]]:
    live = items(name)
    if len(live) > MAX_EXACT_SCAN:
        raise LimitExceeded(
            f"the exact method reads the whole map: at most {MAX_EXACT_SCAN} records",
            path="payload.methods",
        )
    needle = text.lower()
    out = []
    for key in sorted(live):
        data = _DEC.decode(live[key])
        hit = matches(predicate, data) if predicate is not None else needle in text_of(data).lower()
        if hit:
            out.append((key, 1.0))
    return out


def _results(
    name: str, hits: list[Hit], include: bool | None, values: Values
) -> list[rq.HybridSearchResult]:
    out = []
    for key, score, methods in hits:
        value = values(name, key) if include else None
        raw = NIL if value is None else msgspec.Raw(value)
        out.append(rq.HybridSearchResult(key, score, methods, raw))
    return out


def hybrid_search(
    fulltext: FullText,
    vectors: VectorIndexes,
    p: rq.HybridSearchPayload,
    values: Values,
    items: Items,
) -> rq.HybridSearchResp:
    hits = hybrid(fulltext, vectors, p, values, items)
    results = _results(p.map_name, hits, p.include_value, values)
    return rq.HybridSearchResp(rq.HybridSearchRespPayload(p.request_id, results, 0.0))


@dataclass(slots=True)
class _Live:
    conn: int
    query: rq.HybridSearchSubPayload
    hits: dict[str, tuple[float, dict[rq.SearchMethod, float]]] = field(default_factory=dict)


class LiveHybrid:
    """Live hybrid searches, run again after each flush that changed their map."""

    def __init__(self) -> None:
        self._live: LiveTable[_Live] = LiveTable("live hybrid searches", MAX_LIVE_PER_CONNECTION)

    def any(self) -> bool:
        return self._live.any()

    def subscribe(
        self,
        conn: int,
        fulltext: FullText,
        vectors: VectorIndexes,
        p: rq.HybridSearchSubPayload,
        values: Values,
        items: Items,
    ) -> rq.HybridSearchResp:
        hits = hybrid(fulltext, vectors, p, values, items)
        live = _Live(conn, p, {k: (s, m) for k, s, m in hits})
        self._live.add(p.map_name, conn, p.subscription_id, live)
        results = _results(p.map_name, hits, p.include_value, values)
        return rq.HybridSearchResp(rq.HybridSearchRespPayload(p.subscription_id, results, 0.0))

    def unsubscribe(self, conn: int, sub_id: str) -> None:
        self._live.unsubscribe(conn, sub_id)

    def disconnect(self, conn: int) -> None:
        self._live.disconnect(conn)

    def written(self, name: str, keys: Iterable[str]) -> None:
        self._live.written(name, keys)

    def flush(
        self, fulltext: FullText, vectors: VectorIndexes, values: Values, items: Items
    ) -> list[tuple[int, rq.HybridSearchUpdate]]:
        out: list[tuple[int, rq.HybridSearchUpdate]] = []
        for name, keys in self._live.take_changed().items():
            for live in self._live.on(name):
                try:
                    hits = hybrid(fulltext, vectors, live.query, values, items)
                except (LimitExceeded, FeatureDisabled):
                    continue  # the map outgrew the exact method: the last result stands
                new = {k: (s, m) for k, s, m in hits}
                sid = live.query.subscription_id
                for key in live.hits.keys() - new.keys():
                    payload = rq.HybridSearchUpdatePayload(sid, key, 0.0, {}, "LEAVE")
                    out.append((live.conn, rq.HybridSearchUpdate(payload)))
                for key, score, methods in hits:
                    old = live.hits.get(key)
                    if old is not None and old == (score, methods) and key not in keys:
                        continue
                    value = values(name, key) if live.query.include_value else None
                    raw = NIL if value is None else msgspec.Raw(value)
                    kind: sv.ChangeType = "ENTER" if old is None else "UPDATE"
                    payload = rq.HybridSearchUpdatePayload(sid, key, score, methods, kind, raw)
                    out.append((live.conn, rq.HybridSearchUpdate(payload)))
                live.hits = new
        return out
