"""Full-text search over TopGun maps: ``SEARCH``, and live ``SEARCH_SUB`` / ``SEARCH_UPDATE``.

Ranking is BM25 by tantivy (PyPI ``tantivy``, the engine TopGun's server uses), one in-memory
index per map named in the server's ``topgun_search`` setting (``*`` for every map); a map not
named answers ``FeatureDisabled`` in its ``SEARCH_RESP``. A record's text is every string in
its value (nested ones too); its key is the document's id. The indexes are built from the maps
at start-up, so they hold after a restart exactly what the journal holds, and follow every
write through the indexer (``topgun.indexer``): written keys are put into a map's writer and
committed at most every :data:`COMMIT_GAP_MS`, on the server's indexer thread. Searches read
the searcher of the last commit the loop was told of: a consistent view, which the index
watermark (``topgun.index_feed``) describes.

A live search keeps its top ``limit`` hits with ``score >= minScore``; after each commit that
changed its map it is run again and the difference goes out as ``SEARCH_UPDATE``: ``ENTER``,
``UPDATE`` (a changed value or score) and ``LEAVE``. Work per request is bounded: the query's
length, ``limit`` (top-k only, never the whole map), and the live searches per connection.

The index is a data structure in memory, like the maps (no files, no clock): this module is
as sans-I/O as the rest of ``topgun``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from octosync import extras
from octosync.crdt.sync_messages import NIL
from octosync.errors import DecodeError, FeatureDisabled, LimitExceeded
from octosync.topgun.live_table import LiveTable
from octosync.wire import topgun_services as sv

MAX_QUERY_CHARS = 1024
MAX_LIMIT = 100
"""Hits per search: each one is read back, decoded and matched, about 0.06 ms apiece."""
DEFAULT_LIMIT = 10
MAX_LIVE_PER_CONNECTION = 64
COMMIT_GAP_MS = 200
"""The indexes commit at most this often: each commit is a new segment to search and merge,
so committing at every write batch slows searches down under a write load."""
_WRITER_HEAP = 15_000_000
"""tantivy's smallest writer arena (bytes); one writer thread per index."""
_TOKEN = re.compile(r"\w+")
_DEC = msgspec.msgpack.Decoder()

Values = Callable[[str, str], bytes | None]
"""A map's live value of a key (MsgPack bytes), None when absent."""


def text_of(value: Any) -> str:
    """Every string in a record's value, one per line (what the index reads)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return "\n".join(out)


def tokens(text: str) -> list[str]:
    """Lower-cased words, as tantivy's default tokenizer splits them."""
    return [t.lower() for t in _TOKEN.findall(text)]


@dataclass(slots=True)
class _Live:
    conn: int
    sub_id: str
    query: str
    limit: int
    min_score: float
    hits: dict[str, float] = field(default_factory=dict)


class _MapIndex:
    """One map's index: written and committed by the indexer (one thread at a time), read
    through the searcher it last published (a consistent view, never a half-written one)."""

    def __init__(self, tantivy: Any) -> None:
        schema = tantivy.SchemaBuilder()
        schema.add_text_field("key", stored=True, tokenizer_name="raw")
        schema.add_text_field("body", stored=False)
        self.tantivy = tantivy
        self.index = tantivy.Index(schema.build())
        self.writer = self.index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        self.searcher: Any = self.index.searcher()
        """What searches read: the last commit the loop was told of (:meth:`FullText.publish`)."""

    def put(self, key: str, value: bytes | None) -> None:
        self.writer.delete_documents_by_term("key", key)
        if value is not None:
            body = text_of(_DEC.decode(value))
            self.writer.add_document(self.tantivy.Document(key=key, body=body))

    def commit(self) -> Any:
        """Make what was put searchable: the new searcher (for :meth:`FullText.publish`)."""
        self.writer.commit()
        self.index.reload()
        return self.index.searcher()

    def top(self, query: str, limit: int, min_score: float) -> tuple[list[tuple[str, float]], int]:
        """The best ``limit`` hits at or above ``min_score`` (key, score), best first, ties by
        key; and how many documents match at all."""
        parsed, _errors = self.index.parse_query_lenient(query, ["body"])
        searcher = self.searcher
        found = searcher.search(parsed, limit, count=True)
        hits = [(searcher.doc(addr)["key"][0], float(score)) for score, addr in found.hits]
        hits = [(k, s) for k, s in hits if s >= min_score]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits, int(found.count)


class FullText:
    def __init__(self, maps: Collection[str] = ()) -> None:
        """``maps``: the map names to index (``*``: every map)."""
        self.every = "*" in maps
        self.names = frozenset(m for m in maps if m != "*")
        self._tantivy: Any = None
        if self.every or self.names:
            try:
                import tantivy  # optional: the search extra (extras.install_hint)
            except ImportError:
                raise extras.missing_extra("search", "topgun_search") from None
            self._tantivy = tantivy
        self._indexes: dict[str, _MapIndex] = {}
        self._live: LiveTable[_Live] = LiveTable("live searches", MAX_LIVE_PER_CONNECTION)

    @property
    def active(self) -> bool:
        """Some map is indexed."""
        return self._tantivy is not None

    def enabled(self, name: str) -> bool:
        return self.every or name in self.names

    def ensure(self, name: str) -> None:
        """Create the index of map ``name`` (on the loop, before the indexer writes to it)."""
        if name not in self._indexes:
            self._indexes[name] = _MapIndex(self._tantivy)

    def _index(self, name: str) -> _MapIndex:
        self.ensure(name)
        return self._indexes[name]

    def rebuild(self, maps: Iterable[tuple[str, Mapping[str, bytes]]]) -> None:
        """Index maps from their live values (start-up, after the journal is loaded)."""
        for name, items in maps:
            if not self.enabled(name):
                continue
            index = self._index(name)
            index.writer.delete_all_documents()
            for key, value in items.items():
                index.put(key, value)
            index.searcher = index.commit()

    # -- the indexer's side (one thread at a time) ------------------------------------------

    def write(self, name: str, rows: Iterable[tuple[str, bytes | None]]) -> None:
        """Put written keys into map ``name``'s writer (searchable once committed)."""
        index = self._indexes[name]
        for key, value in rows:
            index.put(key, value)

    def commit(self, names: Iterable[str]) -> dict[str, Any]:
        """Commit these maps' writers: each map's new searcher."""
        return {name: self._indexes[name].commit() for name in names if name in self._indexes}

    # -- the loop's side --------------------------------------------------------------------

    def publish(self, searchers: Mapping[str, Any]) -> None:
        """Searches read these commits from now on."""
        for name, searcher in searchers.items():
            self._indexes[name].searcher = searcher

    # -- requests ---------------------------------------------------------------------------

    def _checked(self, name: str, query: str, options: sv.SearchOptions | None) -> _Live:
        if not self.enabled(name):
            raise FeatureDisabled(
                f"full-text search is not enabled for map {name!r} (topgun_search)",
                path="payload.mapName",
            )
        if len(query) > MAX_QUERY_CHARS:
            raise LimitExceeded(
                f"a search query is at most {MAX_QUERY_CHARS} characters", path="payload.query"
            )
        limit = DEFAULT_LIMIT if options is None or options.limit is None else int(options.limit)
        if not 0 < limit <= MAX_LIMIT:
            raise DecodeError(f"limit must be 1..{MAX_LIMIT}", path="payload.options.limit")
        min_score = 0.0 if options is None or options.min_score is None else options.min_score
        return _Live(0, "", query, limit, float(min_score))

    def top(
        self, name: str, query: str, limit: int, min_score: float, values: Values
    ) -> tuple[list[tuple[str, float]], int]:
        """The best hits of an indexed map (for hybrid search), as of its last commit."""
        return self._index(name).top(query, limit, min_score)

    def leaf_top(
        self, name: str, kind: str, words: list[str], slop: int, limit: int
    ) -> list[tuple[str, float]]:
        """The best ``limit`` keys of an indexed map for one full-text predicate of a hybrid
        query, as of its last commit: ``match`` any of ``words`` (BM25), ``matchPhrase``
        the words in order with at most ``slop`` gaps, ``matchPrefix`` a word starting with
        ``words[0]``. The words are index tokens (no query syntax reaches the parser)."""
        index = self._index(name)
        tantivy = self._tantivy
        schema = index.index.schema
        if kind == "matchPrefix":
            query = tantivy.Query.regex_query(schema, "body", re.escape(words[0]) + ".*")
        elif kind == "matchPhrase" and len(words) > 1:
            query = tantivy.Query.phrase_query(schema, "body", words, slop)
        else:
            query, _errors = index.index.parse_query_lenient(" ".join(words), ["body"])
        searcher = index.searcher
        found = searcher.search(query, limit)
        hits = [(searcher.doc(addr)["key"][0], float(score)) for score, addr in found.hits]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits

    def search(self, p: sv.SearchPayload, values: Values) -> sv.SearchResp:
        spec = self._checked(p.map_name, p.query, p.options)
        hits, total = self._index(p.map_name).top(spec.query, spec.limit, spec.min_score)
        results = _results(p.map_name, p.query, hits, values)
        return sv.SearchResp(sv.SearchRespPayload(p.request_id, results, total))

    def subscribe(self, conn: int, p: sv.SearchSubPayload, values: Values) -> sv.SearchResp:
        """A live search: its first results now (``SEARCH_RESP`` under the subscription id),
        its changes at each flush."""
        spec = self._checked(p.map_name, p.query, p.options)
        spec.conn, spec.sub_id = conn, p.subscription_id
        self._live.add(p.map_name, conn, p.subscription_id, spec)
        hits, total = self._index(p.map_name).top(spec.query, spec.limit, spec.min_score)
        spec.hits = dict(hits)
        results = _results(p.map_name, p.query, hits, values)
        return sv.SearchResp(sv.SearchRespPayload(p.subscription_id, results, total))

    def unsubscribe(self, conn: int, sub_id: str) -> None:
        self._live.unsubscribe(conn, sub_id)

    def disconnect(self, conn: int) -> None:
        self._live.disconnect(conn)

    def live_changes(
        self, changed: Mapping[str, Collection[str]], values: Values
    ) -> list[tuple[int, sv.SearchUpdate]]:
        """Maps just committed (with the keys the commit changed): each live search on them,
        run again against the new commit; its updates, in order."""
        out: list[tuple[int, sv.SearchUpdate]] = []
        for name, keys in changed.items():
            index = self._indexes.get(name)
            if index is None:
                continue
            for live in self._live.on(name):
                hits, _total = index.top(live.query, live.limit, live.min_score)
                new = dict(hits)
                for key in live.hits.keys() - new.keys():
                    out.append((live.conn, _update(live, key, NIL, 0.0, [], "LEAVE")))
                for key, score in hits:
                    old = live.hits.get(key)
                    if old is not None and old == score and key not in keys:
                        continue
                    value = values(name, key)
                    if value is None:
                        continue
                    kind: sv.ChangeType = "ENTER" if old is None else "UPDATE"
                    terms = _matched(live.query, value)
                    raw = msgspec.Raw(value)
                    out.append((live.conn, _update(live, key, raw, score, terms, kind)))
                live.hits = new
        return out


def _update(
    live: _Live, key: str, value: msgspec.Raw, score: float, terms: list[str], kind: sv.ChangeType
) -> sv.SearchUpdate:
    payload = sv.SearchUpdatePayload(live.sub_id, key, value, score, terms, kind)
    return sv.SearchUpdate(payload)


def _matched(query: str, value: bytes) -> list[str]:
    """The query's words that the record's text holds."""
    words = set(tokens(text_of(_DEC.decode(value))))
    return [t for t in dict.fromkeys(tokens(query)) if t in words]


def _results(
    name: str, query: str, hits: list[tuple[str, float]], values: Values
) -> list[sv.SearchResult]:
    out = []
    for key, score in hits:
        value = values(name, key)
        if value is not None:
            out.append(sv.SearchResult(key, msgspec.Raw(value), score, _matched(query, value)))
    return out
