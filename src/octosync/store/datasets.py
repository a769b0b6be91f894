"""Each journal record kind as a dataset: its name, Arrow schema and row conversion.

The Parquet export writes one directory per dataset and the Spark source
(``pipeline.journal_source``) reads one per ``kind`` option, both from this table, so a kind's
columns are written down once. Every row starts with the record's journal ``seq`` and ends with
``recorded_ms`` (the server's UTC wall clock in milliseconds when it was journaled).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple

import msgspec
import pyarrow as pa

from octosync.crdt.op import OpRecord
from octosync.store.journal import RawRow
from octosync.store.op_table import OPS_SCHEMA, op_row
from octosync.store.records import (
    KIND_CHAIN_EVENT,
    KIND_CHAIN_STATE,
    KIND_DATASPACE,
    KIND_FRAME,
    KIND_OP,
    KIND_PLANE,
    KIND_YJS,
    ChainEventSeen,
    ChainStateSeen,
    DataspaceEvent,
    PlaneOps,
    Record,
    StreamFrame,
    YjsUpdate,
    decode_record,
)

FRAMES_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("stream", pa.string()),
        ("base_epoch", pa.int64()),
        ("epoch", pa.int64()),
        ("snapshot", pa.bool_()),
        ("payload", pa.binary()),
        ("codec", pa.string()),
        ("state_hash", pa.binary()),
        ("recorded_ms", pa.int64()),
        ("producer", pa.string()),
    ]
)
"""``producer`` is null for records that name none."""

CHAIN_EVENTS_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("chain", pa.string()),
        ("device", pa.string()),
        ("device_sequencer", pa.int64()),
        ("name", pa.string()),
        ("payload", pa.string()),
        ("connection", pa.string()),
        ("recorded_ms", pa.int64()),
    ]
)
CONSUMED_TYPE: Final = pa.list_(
    pa.struct([("device", pa.string()), ("device_sequencer", pa.int64())])
)
CHAIN_STATES_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("chain", pa.string()),
        ("sequencer", pa.int64()),
        ("replace", pa.bool_()),
        ("change", pa.string()),
        ("consumed", CONSUMED_TYPE),
        ("recorded_ms", pa.int64()),
    ]
)
"""``change`` is the merge patch (or replacement) as JSON text; ``consumed`` lists the
``(device, device_sequencer)`` of every event the change consumed."""

DATASPACE_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("dataspace", pa.string()),
        ("action", pa.string()),
        ("handle", pa.int64()),
        ("label", pa.string()),
        ("value", pa.string()),
        ("peer", pa.string()),
        ("recorded_ms", pa.int64()),
    ]
)


PLANE_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("stream", pa.string()),
        ("node", pa.int64()),
        ("key", pa.string()),
        ("wall_time", pa.int64()),
        ("logical", pa.int64()),
        ("peer", pa.int64()),
        ("state", pa.binary()),
        ("position", pa.int64()),
        ("recorded_ms", pa.int64()),
    ]
)
"""One row per op of a shared document's ``PlaneOps`` record: the entry (``node``, ``key``;
null key: none), its stamp (``wall_time``, ``logical``, ``peer``: the writing replica) and its
state bytes (JSON for the kinds of ``crdt.shared``). A compaction's record repeats ops that
were exported before, so a job counts distinct ops."""


def frame_row(row: RawRow, rec: StreamFrame) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "stream": rec.stream,
        "base_epoch": rec.base_epoch,
        "epoch": rec.epoch,
        "snapshot": rec.snapshot,
        "payload": rec.payload,
        "codec": rec.codec,
        "state_hash": rec.state_hash,
        "recorded_ms": row.recorded_ms,
        "producer": rec.producer,
    }


def chain_event_row(row: RawRow, rec: ChainEventSeen) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "chain": rec.chain,
        "device": rec.device,
        "device_sequencer": rec.device_sequencer,
        "name": rec.name,
        "payload": rec.payload,
        "connection": rec.connection,
        "recorded_ms": row.recorded_ms,
    }


def chain_state_row(row: RawRow, rec: ChainStateSeen) -> dict[str, Any]:
    consumed = [
        {"device": d, "device_sequencer": s}
        for d in sorted(rec.consumed)
        for s in sorted(rec.consumed[d])
    ]
    return {
        "seq": row.seq,
        "chain": rec.chain,
        "sequencer": rec.sequencer,
        "replace": rec.replace,
        "change": rec.change,
        "consumed": consumed,
        "recorded_ms": row.recorded_ms,
    }


def dataspace_row(row: RawRow, rec: DataspaceEvent) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "dataspace": rec.dataspace,
        "action": rec.action,
        "handle": rec.handle,
        "label": rec.label,
        "value": rec.value,
        "peer": rec.peer,
        "recorded_ms": row.recorded_ms,
    }


def plane_rows(row: RawRow, rec: PlaneOps) -> list[dict[str, Any]]:
    return [
        {
            "seq": row.seq,
            "stream": rec.stream,
            "node": op.slot_id,
            "key": op.key,
            "wall_time": op.stamp.wall_time,
            "logical": op.stamp.logical,
            "peer": op.stamp.peer,
            "state": op.state,
            "position": rec.position,
            "recorded_ms": row.recorded_ms,
        }
        for op in rec.ops
    ]


YJS_UPDATES_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("document", pa.string()),
        ("update", pa.binary()),
        ("writer", pa.string()),
        ("position", pa.int64()),
        ("recorded_ms", pa.int64()),
    ]
)
"""A Yjs update the ``/yjs`` face journaled, as its writer sent it (``writer`` is null on a
compacted record: the merge of many writers' updates; ``position``, in a cluster, the op
stream's sequence an update of another node ends, else null)."""


def yjs_update_row(row: RawRow, rec: YjsUpdate) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "document": rec.document,
        "update": rec.update,
        "writer": rec.writer,
        "position": rec.position,
        "recorded_ms": row.recorded_ms,
    }


def _op_row(row: RawRow, rec: OpRecord) -> dict[str, Any]:
    return op_row(rec, row.seq, row.recorded_ms)


def _one(row: Callable[[RawRow, Any], dict[str, Any]]) -> Callable[[RawRow, Any], list[Any]]:
    return lambda raw, rec: [row(raw, rec)]


class Dataset(NamedTuple):
    name: str
    """The export's directory and the Spark source's ``kind`` option."""
    kind: str
    """The journal's record kind."""
    schema: pa.Schema
    rows: Callable[[RawRow, Any], Iterable[dict[str, Any]]]
    """A record's rows (one, or one per op for a batch of ops)."""


DATASETS: Final = (
    Dataset("ops", KIND_OP, OPS_SCHEMA, _one(_op_row)),
    Dataset("frames", KIND_FRAME, FRAMES_SCHEMA, _one(frame_row)),
    Dataset("chain_events", KIND_CHAIN_EVENT, CHAIN_EVENTS_SCHEMA, _one(chain_event_row)),
    Dataset("chain_states", KIND_CHAIN_STATE, CHAIN_STATES_SCHEMA, _one(chain_state_row)),
    Dataset("dataspace", KIND_DATASPACE, DATASPACE_SCHEMA, _one(dataspace_row)),
    Dataset("plane", KIND_PLANE, PLANE_SCHEMA, plane_rows),
    Dataset("yjs_updates", KIND_YJS, YJS_UPDATES_SCHEMA, _one(yjs_update_row)),
)
BY_NAME: Final = {d.name: d for d in DATASETS}
BY_KIND: Final = {d.kind: d for d in DATASETS}
"""Drops have no dataset: recovery reads them, the pipeline does not."""


_OPS: Final = msgspec.msgpack.Decoder(list[OpRecord])


def _ops_batch(raw: Sequence[RawRow]) -> pa.RecordBatch:
    """Op rows straight into columns: the bodies decoded in one call as one MsgPack array
    (the same strict decode as one by one), no row dicts (the stream's hot path)."""
    rows = [r for r in raw if r.kind == KIND_OP]
    try:
        recs = _OPS.decode(
            b"\xdd" + len(rows).to_bytes(4, "big") + b"".join([r.body for r in rows])
        )
    except msgspec.DecodeError:  # name the record: decode them one by one
        return pa.RecordBatch.from_pylist(rows_of(BY_NAME["ops"], rows), schema=OPS_SCHEMA)
    columns = [
        [r.seq for r in rows],
        [o.map for o in recs],
        [o.key for o in recs],
        [o.op.value for o in recs],
        [o.value for o in recs],
        [o.ts.millis for o in recs],
        [o.ts.counter for o in recs],
        [o.ts.node_id for o in recs],
        [o.origin for o in recs],
        [o.op_id for o in recs],
        [r.recorded_ms for r in rows],
    ]
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, OPS_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=OPS_SCHEMA)


def record_batch(dataset: Dataset, raw: Sequence[RawRow]) -> pa.RecordBatch:
    """The rows of ``dataset`` among ``raw`` as one Arrow batch in its schema."""
    if dataset.kind == KIND_OP:
        return _ops_batch(raw)
    return pa.RecordBatch.from_pylist(rows_of(dataset, raw), schema=dataset.schema)


def rows_of(dataset: Dataset, raw: Sequence[RawRow]) -> list[dict[str, Any]]:
    """The rows of ``dataset`` among ``raw`` (other kinds are skipped)."""
    out: list[dict[str, Any]] = []
    for row in raw:
        if row.kind == dataset.kind:
            rec: Record = decode_record(row.kind, row.body, seq=row.seq)
            out.extend(dataset.rows(row, rec))
    return out
