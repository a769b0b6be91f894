"""Compaction of shared documents' history in the journal.

Every accepted frame of a multi-writer stream is a ``PlaneOps`` record, and a restart merges
them all, so a busy document's history would grow without end. Plane merges are idempotent and
commutative, and each entry's winning op is all a replica keeps, so a stream's records through
some seq can be replaced by the entries they merge to, in chunks, in one transaction: a restart
merges the replacement and any later records to the same state. Nothing is lost that a replica
would hold; what goes is the record of ops that later ops overwrote, and the entries of list
tombstones a ``NAME/gc`` entry collected (the journal's history of a document is its state,
not its edits). The maintenance round exports plane records (the
``plane`` dataset) before it compacts them, so the pipeline still sees every edit; the
replacement records are exported again and counted once (a job takes distinct ops).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from octosync.crdt.entries import merge_collecting
from octosync.crdt.plane import PlaneReplica
from octosync.ipc.messages import CrdtOp
from octosync.store.journal import Journal
from octosync.store.records import KIND_PLANE, PlaneOps, decode_record, encode_record

CHUNK = 1000
"""Entries per replacement record (the size a member's joining frames have)."""


def _chunks(ops: Sequence[CrdtOp]) -> Iterator[tuple[CrdtOp, ...]]:
    for at in range(0, len(ops), CHUNK):
        yield tuple(ops[at : at + CHUNK])


def plane_records(journal: Journal, stream: str, through: int) -> Iterator[PlaneOps]:
    """One stream's plane records with ``seq <= through``, decoded, in seq order."""
    for row in journal.scoped_rows(KIND_PLANE, stream, 1, through):
        record = decode_record(KIND_PLANE, row.body, seq=row.seq)
        assert isinstance(record, PlaneOps)
        yield record


def compact_stream(journal: Journal, stream: str, through: int | None = None) -> int:
    """Replace one stream's plane records with ``seq <= through`` (None: every one) by the
    entries they merge to; returns how many records went (blocking: run it in a thread)."""
    through = journal.latest_seq() if through is None else through
    replica = PlaneReplica(max_entries=2**62)  # the journal held it: no limit applies here
    position: int | None = None  # in a cluster: how far the op stream is merged (kept)
    for record in plane_records(journal, stream, through):
        merge_collecting(replica, record.ops)  # collected tombstones stay out of the replacement
        if record.position is not None:
            position = max(position or 0, record.position)
    state = replica.ops()
    if not state:
        return 0
    chunks = list(_chunks(state))
    encoded = [
        encode_record(PlaneOps(stream, chunk, position if i == len(chunks) - 1 else None))
        for i, chunk in enumerate(chunks)
    ]
    return journal.replace_scoped(KIND_PLANE, stream, through, encoded)


def compact_planes(journal: Journal, *, min_records: int, through: int | None = None) -> int:
    """Compact every stream with at least ``min_records`` plane records (and more records
    than its compacted form needs), up to seq ``through`` (the export's watermark, so no edit
    goes before it is exported; None: every record); returns how many records went in all."""
    removed = 0
    for stream in journal.scopes(KIND_PLANE):
        count = journal.count_scoped(KIND_PLANE, stream)
        if count >= min_records:
            removed += compact_stream(journal, stream, through)
    return removed
