"""The op record as an Arrow row: the one schema of ``crdt.OpRecord`` in Parquet, and both
conversions. The journal export, the Spark pipeline, the restart from a compaction, the
synthetic generator and the tests all take the op columns from here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp

RECORD_SCHEMA: Final = pa.schema(
    [
        ("map", pa.string()),
        ("key", pa.string()),
        ("op", pa.string()),
        ("value", pa.binary()),
        ("millis", pa.int64()),
        ("counter", pa.int32()),
        ("node", pa.string()),
        ("origin", pa.string()),
        ("op_id", pa.string()),
    ]
)
"""The record's own columns, in ``OpRecord`` field order (``ts`` spread into three)."""

OPS_SCHEMA: Final = pa.schema([("seq", pa.int64()), *RECORD_SCHEMA, ("recorded_ms", pa.int64())])
"""A journalled op: its journal ``seq``, the record, and when it was appended (UTC millis)."""


def op_row(rec: OpRecord, seq: int, recorded_ms: int = 0) -> dict[str, Any]:
    """One ``OPS_SCHEMA`` row."""
    return {
        "seq": seq,
        "map": rec.map,
        "key": rec.key,
        "op": rec.op.value,
        "value": rec.value,
        "millis": rec.ts.millis,
        "counter": rec.ts.counter,
        "node": rec.ts.node_id,
        "origin": rec.origin,
        "op_id": rec.op_id,
        "recorded_ms": recorded_ms,
    }


def op_table(records: Sequence[OpRecord], first_seq: int = 1, recorded_ms: int = 0) -> pa.Table:
    """``records`` as an ``OPS_SCHEMA`` table, numbered from ``first_seq``."""
    rows = [op_row(r, first_seq + i, recorded_ms) for i, r in enumerate(records)]
    return pa.Table.from_pylist(rows, schema=OPS_SCHEMA)


def iter_op_records(batches: Iterable[pa.RecordBatch]) -> Iterator[OpRecord]:
    """Op records from Arrow batches holding (at least) the ``RECORD_SCHEMA`` columns."""
    names = RECORD_SCHEMA.names
    for batch in batches:
        cols = [batch.column(n).to_pylist() for n in names]
        for m, k, op, value, millis, counter, node, origin, op_id in zip(*cols, strict=True):
            yield OpRecord(m, k, OpKind(op), value, Timestamp(millis, counter, node), origin, op_id)
