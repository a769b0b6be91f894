"""Yjs documents in the journal: read back at start-up, and compacted.

Every update the ``/yjs`` face accepted is a ``YjsUpdate`` record. Yjs updates commute and
apply idempotently, so a document's records through some seq can be replaced, in one
transaction, by the one update they merge to (pycrdt's ``merge_updates``: edits and deletions
kept, pending structs too): a restart applies the replacement and any later records to the
same document. What goes is the record of which connection sent which edit, not state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from pycrdt import merge_updates

from octosync.store.journal import Journal
from octosync.store.records import KIND_YJS, YjsUpdate, decode_record, encode_record


def yjs_records(journal: Journal, document: str, through: int) -> Iterator[YjsUpdate]:
    """One document's journaled records with ``seq <= through``, in seq order."""
    for row in journal.scoped_rows(KIND_YJS, document, 1, through):
        record = decode_record(KIND_YJS, row.body, seq=row.seq)
        assert isinstance(record, YjsUpdate)
        yield record


def yjs_updates(journal: Journal, document: str, through: int) -> Iterator[bytes]:
    """One document's journaled updates with ``seq <= through``, in seq order."""
    for record in yjs_records(journal, document, through):
        yield record.update


class YjsRestorable(Protocol):
    replica_position: int

    def restore(self, name: str, updates: Iterator[bytes]) -> None: ...


def restore_yjs(journal: Journal, documents: YjsRestorable) -> int:
    """Apply every journaled Yjs update to ``documents`` (blocking); the highest cluster
    stream position journaled becomes ``documents.replica_position``. Returns how many
    documents there were."""
    latest = journal.latest_seq()
    names = journal.scopes(KIND_YJS)
    for name in names:
        documents.restore(name, _noting_positions(journal, name, latest, documents))
    return len(names)


def _noting_positions(
    journal: Journal, document: str, through: int, documents: YjsRestorable
) -> Iterator[bytes]:
    for record in yjs_records(journal, document, through):
        if record.position is not None and record.position > documents.replica_position:
            documents.replica_position = record.position
        yield record.update


def compact_document(journal: Journal, document: str, through: int | None = None) -> int:
    """Replace one document's records with ``seq <= through`` (None: every one) by their
    merged update; returns how many went (blocking: run it in a thread)."""
    through = journal.latest_seq() if through is None else through
    records = list(yjs_records(journal, document, through))
    if len(records) < 2:
        return 0
    merged = merge_updates(*(r.update for r in records))
    positions = [r.position for r in records if r.position is not None]
    record = encode_record(YjsUpdate(document, merged, position=max(positions, default=None)))
    return journal.replace_scoped(KIND_YJS, document, through, [record])


def compact_yjs(journal: Journal, *, min_records: int, through: int | None = None) -> int:
    """Compact every document with at least ``min_records`` records, up to seq ``through``
    (the export's watermark, so no update goes before it is exported; None: every record);
    returns how many records went in all."""
    removed = 0
    for document in journal.scopes(KIND_YJS):
        if journal.count_scoped(KIND_YJS, document) >= min_records:
            removed += compact_document(journal, document, through)
    return removed
