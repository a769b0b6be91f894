"""What the search indexes still have to take in: written keys, coalesced, with a watermark.

Every write to an indexed map puts ``(map, key, value)`` here, numbered in write order. A key
written again before the indexer took it keeps its place (and its first number) with the newer
value, so the feed holds at most one entry per key, sharing the map's own value bytes: an
indexer that falls behind costs memory bounded by the maps, never by the write rate. The
indexer takes batches in order (at most :data:`MAX_BATCH` entries, one batch at a time);
:meth:`IndexFeed.done` says a batch is in the indexes and :meth:`IndexFeed.published` that what
is in them is searchable (a commit), which moves the watermark: every write numbered up to it
is searchable (or a later write of its key is).

Sans-I/O and single-threaded: the event loop puts and takes; only a taken batch crosses to the
indexer's thread, as an immutable value.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

MAX_BATCH = 5_000
"""Entries per batch: an indexer thread's one step (and one full-text commit)."""


@dataclass(frozen=True, slots=True)
class Row:
    map: str
    key: str
    value: bytes | None
    """The key's value (MsgPack) when the batch was taken; None: absent (remove it)."""
    first: int = 0
    """The number of the key's oldest write this row covers."""


@dataclass(frozen=True, slots=True)
class IndexBatch:
    rows: tuple[Row, ...]
    through: int
    """Every write numbered up to this is in ``rows`` or in an earlier batch."""


class IndexFeed:
    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self.written = 0
        """The number of the last write put here."""
        self.indexed = 0
        """The watermark: writes numbered up to this are searchable."""
        self.applied = 0
        """Writes numbered up to this are in the indexes (searchable at the next commit)."""
        self._pending: dict[tuple[str, str], tuple[int, bytes | None]] = {}
        self._taken: IndexBatch | None = None

    def __len__(self) -> int:
        """Entries waiting (one per key at most)."""
        return len(self._pending)

    @property
    def in_flight(self) -> bool:
        """A batch was taken and is not done yet."""
        return self._taken is not None

    def idle(self) -> bool:
        """Nothing waits and nothing is being indexed: the watermark is the last write."""
        return not self._pending and self._taken is None

    def put(self, map_name: str, key: str, value: bytes | None) -> int:
        """A write of ``key`` (its value now); its number."""
        self.written += 1
        entry = (map_name, key)
        old = self._pending.get(entry)
        self._pending[entry] = (self.written if old is None else old[0], value)
        return self.written

    def take(self) -> IndexBatch | None:
        """The oldest entries (at most ``max_batch``), None when nothing waits or a batch is
        already being indexed."""
        if self._taken is not None or not self._pending:
            return None
        pending = self._pending
        rows: list[Row] = []
        for entry in list(islice(pending, self.max_batch)):
            seq, value = pending.pop(entry)
            rows.append(Row(entry[0], entry[1], value, seq))
        first_left = next(iter(pending.values()), None)
        through = self.written if first_left is None else first_left[0] - 1
        self._taken = IndexBatch(tuple(rows), through)
        return self._taken

    def done(self, batch: IndexBatch) -> None:
        """The taken batch is in the indexes (searchable at the next commit)."""
        if batch is not self._taken:
            raise ValueError("not the batch being indexed")
        self._taken = None
        self.applied = max(self.applied, batch.through)

    def published(self) -> None:
        """The indexes committed what they hold: the watermark moves."""
        self.indexed = self.applied

    def failed(self, batch: IndexBatch) -> None:
        """The taken batch could not be indexed: its entries wait again (a newer write of a
        key keeps its value), the watermark stays."""
        if batch is not self._taken:
            raise ValueError("not the batch being indexed")
        self._taken = None
        again = {(r.map, r.key): (r.first, r.value) for r in batch.rows}
        for entry, (seq, value) in self._pending.items():
            first = again.get(entry)
            again[entry] = (seq if first is None else first[0], value)
        self._pending = again
