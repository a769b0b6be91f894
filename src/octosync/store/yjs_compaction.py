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


def yjs_updates(journal: Journal, document: str, through: int) -> Iterator[bytes]:
    """One document's journaled updates with ``seq <= through``, in seq order."""
    for row in journal.scoped_rows(KIND_YJS, document, 1, through):
        record = decode_record(KIND_YJS, row.body, seq=row.seq)
        assert isinstance(record, YjsUpdate)
        yield record.update


class YjsRestorable(Protocol):
    def restore(self, name: str, updates: Iterator[bytes]) -> None: ...


def restore_yjs(journal: Journal, documents: YjsRestorable) -> int:
    """Apply every journaled Yjs update to ``documents`` (blocking); returns how many
    documents there were."""
    latest = journal.latest_seq()
    names = journal.scopes(KIND_YJS)
    for name in names:
        documents.restore(name, yjs_updates(journal, name, latest))
    return len(names)


def compact_document(journal: Journal, document: str, through: int | None = None) -> int:
    """Replace one document's records with ``seq <= through`` (None: every one) by their
    merged update; returns how many went (blocking: run it in a thread)."""
    through = journal.latest_seq() if through is None else through
    updates = list(yjs_updates(journal, document, through))
    if len(updates) < 2:
        return 0
    merged = merge_updates(*updates)
    record = encode_record(YjsUpdate(document, merged))
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
