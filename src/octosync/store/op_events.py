"""The journal's op records in seq order, for TopGun's event journal (``JOURNAL_READ``,
``JOURNAL_SUBSCRIBE``), read on a worker thread (the journal serialises its connection)."""

from __future__ import annotations

from octosync.crdt.op import OpRecord
from octosync.store.journal import Journal
from octosync.store.records import KIND_OP, decode_record


class OpSource:
    """``topgun.event_journal.JournalSource`` over one journal."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def read(self, start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
        """``limit`` rows from ``start`` (of any kind, so the scan is bounded), keeping the op
        records; and where the next read starts."""
        rows = self.journal.raw_rows(start, 2**63 - 1, limit=limit)
        ops = []
        for row in rows:
            if row.kind == KIND_OP:
                rec = decode_record(row.kind, row.body, seq=row.seq)
                if isinstance(rec, OpRecord):
                    ops.append((row.seq, rec))
        return ops, (rows[-1].seq + 1 if rows else start)

    def latest(self) -> int:
        return self.journal.latest_seq()
