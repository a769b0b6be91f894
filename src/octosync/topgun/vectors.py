"""Vector search over TopGun maps: ``VECTOR_SEARCH`` by an HNSW index (PyPI ``usearch``).

One in-memory index per map named in the server's ``topgun_vectors`` setting (``*``: every
map), cosine similarity. A record's vector is its top-level ``vector`` field when that holds
``dim`` numbers (or ``dim`` little-endian float32s as bytes), else the embedding of its text
(every string in the value) by the server's :class:`~octosync.topgun.embedding.Embedder`;
a record with neither is not in the index. Like the full-text indexes, these are rebuilt from
the maps at start-up and follow every write through the indexer (``topgun.indexer``, the
server's indexer thread): vectors are computed outside any lock, then inserted
:data:`CHUNK` at a time under the map's lock, which a search holds for its HNSW walk, so a
search sees each chunk whole and waits for at most one. Work per request is bounded: ``k``,
``efSearch`` and the query's dimension are checked; a search is one HNSW walk, never a scan.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from octosync import extras
from octosync.errors import DecodeError, FeatureDisabled, LimitExceeded
from octosync.topgun.embedding import Embedder, HashingEmbedder
from octosync.topgun.search import text_of

MAX_K = 1000
CHUNK = 64
"""Vectors inserted per hold of a map's lock (an HNSW insert costs about 0.05 ms, more on a
busy machine): how long a search may wait for the indexer."""
MAX_EF = 4096
DEFAULT_EF = 256
"""HNSW candidates kept per search without the client's ``efSearch``."""
_DEC = msgspec.msgpack.Decoder()


def record_vector(value: Any, embedder: Embedder) -> list[float] | None:
    """The vector a record is indexed under (see the module's docstring)."""
    dim = embedder.dim
    given = value.get("vector") if isinstance(value, dict) else None
    if isinstance(given, list) and len(given) == dim and all(_number(x) for x in given):
        return [float(x) for x in given]
    if isinstance(given, bytes) and len(given) == 4 * dim:
        return list(struct.unpack(f"<{dim}f", given))
    return embedder.embed(text_of(value))


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def query_vector(raw: bytes, dim: int, path: str) -> list[float]:
    if len(raw) != 4 * dim:
        raise DecodeError(
            f"the index holds {dim}-dimensional vectors ({4 * dim} bytes of float32), "
            f"got {len(raw)} bytes",
            path=path,
        )
    return list(struct.unpack(f"<{dim}f", raw))


class _MapVectors:
    def __init__(self, usearch: Any, dim: int) -> None:
        self.index = usearch.Index(ndim=dim, metric="cos", dtype="f32")
        self.labels: dict[str, int] = {}
        self.keys: dict[int, str] = {}
        self.next_label = 1
        self.lock = threading.Lock()
        """Held by the indexer for one chunk of inserts, and by a search for its walk."""

    def put_many(self, rows: list[tuple[str, list[float] | None]], np: Any) -> None:
        """Replace the vectors of these keys (None: remove), added in one call."""
        added: list[tuple[str, list[float]]] = []
        for key, vector in rows:
            old = self.labels.pop(key, None)
            if old is not None:
                self.index.remove(old)
                del self.keys[old]
            if vector is not None:
                added.append((key, vector))
        if not added:
            return
        labels = np.arange(self.next_label, self.next_label + len(added), dtype=np.uint64)
        self.next_label += len(added)
        self.index.add(labels, np.asarray([v for _, v in added], dtype=np.float32), threads=1)
        for label, (key, _) in zip(labels.tolist(), added, strict=True):
            self.labels[key] = label
            self.keys[label] = key


class VectorIndexes:
    def __init__(self, maps: Collection[str] = (), embedder: Embedder | None = None) -> None:
        self.every = "*" in maps
        self.names = frozenset(m for m in maps if m != "*")
        self.embedder: Embedder = embedder or HashingEmbedder()
        self._usearch: Any = None
        self._np: Any = None
        if self.every or self.names:
            try:  # optional: the vector extra (extras.install_hint)
                import numpy
                from usearch import index as usearch
            except ImportError:
                raise extras.missing_extra("vector", "topgun_vectors") from None
            self._usearch, self._np = usearch, numpy
        self._maps: dict[str, _MapVectors] = {}

    @property
    def active(self) -> bool:
        return self._usearch is not None

    def enabled(self, name: str) -> bool:
        return self.every or name in self.names

    def _map(self, name: str) -> _MapVectors:
        found = self._maps.get(name)
        if found is None:
            found = self._maps[name] = _MapVectors(self._usearch, self.embedder.dim)
        return found

    def rebuild(self, maps: Iterable[tuple[str, Mapping[str, bytes]]]) -> None:
        for name, items in maps:
            if self.enabled(name):
                vectors = self._maps[name] = _MapVectors(self._usearch, self.embedder.dim)
                rows = [(k, record_vector(_DEC.decode(v), self.embedder)) for k, v in items.items()]
                vectors.put_many(rows, self._np)

    def ensure(self, name: str) -> None:
        """Create the index of map ``name`` (on the loop, before the indexer writes to it)."""
        self._map(name)

    def write(self, name: str, rows: Iterable[tuple[str, bytes | None]]) -> None:
        """Re-index written keys of map ``name`` (the indexer's side): each value's vector is
        computed first, then inserted :data:`CHUNK` at a time under the map's lock."""
        vectors = self._maps[name]
        embedded = [
            (key, None if value is None else record_vector(_DEC.decode(value), self.embedder))
            for key, value in rows
        ]
        for i in range(0, len(embedded), CHUNK):
            with vectors.lock:
                vectors.put_many(embedded[i : i + CHUNK], self._np)

    def require(self, name: str) -> None:
        if not self.enabled(name):
            raise FeatureDisabled(
                f"vector search is not enabled for map {name!r} (topgun_vectors)",
                path="payload.mapName",
            )

    def nearest(
        self, name: str, vector: list[float], k: int, ef: int | None
    ) -> tuple[list[tuple[str, float]], int]:
        """The ``k`` nearest keys with their cosine similarity, best first (ties by key); and
        how many vectors the index holds."""
        self.require(name)
        if not 0 < k <= MAX_K:
            raise LimitExceeded(f"k must be 1..{MAX_K}", path="payload.k")
        if ef is not None and not 0 < ef <= MAX_EF:
            raise LimitExceeded(f"efSearch must be 1..{MAX_EF}", path="payload.efSearch")
        vectors = self._map(name)
        query = self._np.asarray(vector, dtype=self._np.float32)
        with vectors.lock:
            size = len(vectors.index)
            if size == 0:
                return [], 0
            vectors.index.expansion_search = max(ef or DEFAULT_EF, k)
            found = vectors.index.search(query, k, threads=1)  # no pool to wait for
            hits = [
                (vectors.keys[int(label)], 1.0 - float(dist))
                for label, dist in zip(found.keys, found.distances, strict=True)
                if int(label) in vectors.keys
            ]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits, size

    def stored(self, name: str, key: str) -> bytes | None:
        """A key's indexed vector as little-endian float32 bytes (``includeVectors``)."""
        vectors = self._maps.get(name)
        if vectors is None:
            return None
        with vectors.lock:
            label = vectors.labels.get(key)
            got = None if label is None else vectors.index.get(label)
        return None if got is None else self._np.asarray(got, dtype="<f4").tobytes()
