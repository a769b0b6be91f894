"""The journal's op records in seq order, for TopGun's event journal (``JOURNAL_READ``)."""

from __future__ import annotations

from octosync.crdt.op import OpRecord
from octosync.store.journal import Journal
from octosync.store.records import KIND_OP, decode_record
from octosync.topgun.event_journal import JournalSource


def op_source(journal: Journal) -> JournalSource:
    """Reads ``limit`` rows from ``start`` (any kind, so the scan is bounded) and keeps the op
    records; safe on a worker thread (the journal serialises its connection)."""

    def read(start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
        rows = journal.raw_rows(start, 2**63 - 1, limit=limit)
        ops = []
        for row in rows:
            if row.kind == KIND_OP:
                rec = decode_record(row.kind, row.body, seq=row.seq)
                if isinstance(rec, OpRecord):
                    ops.append((row.seq, rec))
        return ops, (rows[-1].seq + 1 if rows else start)

    return read
