"""The search indexes' writing side: a batch of written keys in, what became searchable out.

:meth:`Indexer.run` puts a batch (``topgun.index_feed``) into the full-text writers and the
vector indexes and, when asked, commits: it is what the server runs on its indexer thread, one
batch at a time, so the event loop never waits for tokenizing, embedding or a commit. It
touches only the writers, the vector indexes (under their locks) and its own record of what
the next commit publishes; its answer, :class:`Indexed`, is an immutable value the loop turns
into published searchers, a new watermark and live-search updates (``TopGunCore.indexed``).
A bare core (no server) runs the same step inline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from octosync.topgun.index_feed import IndexBatch
from octosync.topgun.search import FullText
from octosync.topgun.vectors import VectorIndexes


@dataclass(frozen=True, slots=True)
class Indexed:
    batch: IndexBatch | None
    """The batch this step took in (None: a commit of what earlier steps put)."""
    searchers: Mapping[str, Any]
    """Per map, the full-text searcher of this step's commit (empty: nothing committed)."""
    changed: Mapping[str, Mapping[str, bytes | None]]
    """Per map, the keys this commit made searchable, with the values they were indexed
    under; empty when the step did not commit."""
    committed: bool


class Indexer:
    def __init__(self, fulltext: FullText, vectors: VectorIndexes) -> None:
        self.fulltext = fulltext
        self.vectors = vectors
        self._since: dict[str, dict[str, bytes | None]] = {}
        """Keys put since the last commit, per map: what the next commit publishes."""

    @property
    def uncommitted(self) -> bool:
        """Some key was put and not committed yet."""
        return bool(self._since)

    def run(self, batch: IndexBatch | None, commit: bool) -> Indexed:
        """Put ``batch`` into the indexes; with ``commit``, make everything put so far
        searchable. Raises whatever the index libraries raise (the batch is then retried)."""
        if batch is not None:
            by_map: dict[str, dict[str, bytes | None]] = {}
            for row in batch.rows:
                by_map.setdefault(row.map, {})[row.key] = row.value
            for name, rows in by_map.items():
                if self.fulltext.enabled(name):
                    self.fulltext.write(name, rows.items())
                if self.vectors.enabled(name):
                    self.vectors.write(name, rows.items())
                self._since.setdefault(name, {}).update(rows)
        if not commit:
            return Indexed(batch, {}, {}, False)
        searchers = self.fulltext.commit([n for n in self._since if self.fulltext.enabled(n)])
        changed, self._since = self._since, {}
        return Indexed(batch, searchers, changed, True)
