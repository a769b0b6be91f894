"""The carriers folded into state by ``crdt.fold.MapStore`` itself, one Spark partition at a
time: the pipeline and the in-process store share one set of CRDT rules (LWW order, OR-Map
observed-remove, PN counters, tombstone GC, Merkle entry hashes), so they cannot drift apart.

The carriers are about one row per LWW key plus the OR and counter ops; they are hashed into
partitions by ``(map, key)``, so every key is folded whole in exactly one partition, and each
partition streams its Arrow batches into one store. A partition emits three kinds of rows in
one schema: snapshot ``ROW`` s, the ``RECORD`` s that carry the state (what a restart folds),
and its ``LEAF`` hashes per map. Leaf hashes are fmix32 sums over disjoint keys, so the driver
adds the partitions' leaves and builds the inner levels (:mod:`.merkle`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import functions as sf

from octosync.crdt.fold import MapStore
from octosync.crdt.merkle import DEFAULT_DEPTH
from octosync.errors import CrdtValueError
from octosync.pipeline.transforms.ops import SNAPSHOT_COLUMNS, DataFrame
from octosync.store.op_table import OPS_SCHEMA, iter_op_records, op_row

ROW: Final = 0
RECORD: Final = 1
LEAF: Final = 2

FOLDED_SCHEMA: Final = pa.schema(
    [
        ("kind", pa.int8()),
        *OPS_SCHEMA,
        ("tombstone", pa.bool_()),
        ("leaf", pa.int32()),
        ("hash", pa.int64()),
    ]
)
SNAPSHOT_SCHEMA: Final = pa.schema([FOLDED_SCHEMA.field(c) for c in SNAPSHOT_COLUMNS])
_BATCH = 65_536


class Folder:
    """Op records folded by ``MapStore``, with each record's latest delivery (seq and append
    time, which ``records/`` keeps); more batches can be added after :meth:`rows`."""

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self.store = MapStore(depth)
        self.newest: dict[tuple[str, str, str], tuple[int, int]] = {}
        self.touched: set[tuple[str, str]] = set()
        """Keys added to since the last :meth:`tables`."""
        self._tables: tuple[pa.Table, pa.Table] | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        store, newest = self.store, self.newest
        seqs = batch.column("seq").to_pylist()
        appended = batch.column("recorded_ms").to_pylist()
        for rec, seq, ms in zip(iter_op_records([batch]), seqs, appended, strict=True):
            try:
                store.apply(rec)
            except CrdtValueError as exc:
                raise ValueError(f"op {rec.op_id}: {rec.op.value} value: {exc}") from None
            slot = (rec.map, rec.key, rec.op_id)
            newest[slot] = max(newest.get(slot, (seq, ms)), (seq, ms))
            self.touched.add((rec.map, rec.key))

    def tables(self) -> tuple[pa.Table, pa.Table, list[tuple[str, int, int]]]:
        """The snapshot (``SNAPSHOT_SCHEMA``), the records (``OPS_SCHEMA``) and the Merkle
        leaves ``(map, leaf, hash)`` of everything added (no GC): the last call's tables with
        the rows of the keys touched since replaced, so a call costs what changed, not the
        whole state."""
        store, newest = self.store, self.newest
        touched = sorted(self.touched)
        self.touched = set()
        records = pa.Table.from_pylist(
            [
                op_row(rec, *newest[(m, k, rec.op_id)])
                for m, k in touched
                for rec in store.records_for(m, k)
            ],
            schema=OPS_SCHEMA,
        )
        snapshot = pa.Table.from_pylist(
            [
                {c: getattr(row, c) for c in SNAPSHOT_COLUMNS}
                for m, k in touched
                for row in store.rows_for(m, k)
            ],
            schema=SNAPSHOT_SCHEMA,
        )
        if self._tables is not None:
            keys = pa.table({"map": [m for m, _ in touched], "key": [k for _, k in touched]})
            kept = [
                t.join(keys, ["map", "key"], join_type="left anti").select(t.column_names)
                for t in self._tables
            ]
            snapshot = pa.concat_tables([kept[0], snapshot])
            records = pa.concat_tables([kept[1], records])
        self._tables = (snapshot, records)
        leaves = [
            (m, leaf, h)
            for m in store.maps()
            for leaf, h in sorted(store.merkle(m).leaf_hashes().items())
        ]
        return snapshot, records, leaves

    def rows(self, gc_horizon_millis: int | None = None) -> list[dict[str, Any]]:
        """``FOLDED_SCHEMA`` rows of everything added (a GC horizon collects the store)."""
        store, newest = self.store, self.newest
        out: list[dict[str, Any]] = []
        for m, k in sorted({(m, k) for m, k, _ in newest}):
            for rec in store.records_for(m, k):
                out.append({"kind": RECORD, **op_row(rec, *newest[(m, k, rec.op_id)])})
        if gc_horizon_millis is not None:
            store.gc(gc_horizon_millis)
        for row in store.rows():
            out.append({"kind": ROW, **{c: getattr(row, c) for c in SNAPSHOT_COLUMNS}})
        for m in store.maps():
            for leaf, h in sorted(store.merkle(m).leaf_hashes().items()):
                out.append({"kind": LEAF, "map": m, "leaf": leaf, "hash": h})
        return out


def _fold_partition(
    batches: Iterator[pa.RecordBatch], *, gc_horizon_millis: int | None, depth: int
) -> Iterator[pa.RecordBatch]:
    folder = Folder(depth)
    for batch in batches:
        folder.add(batch)
    out = folder.rows(gc_horizon_millis)
    for i in range(0, len(out), _BATCH):
        yield pa.RecordBatch.from_pylist(out[i : i + _BATCH], schema=FOLDED_SCHEMA)


def fold_carriers(
    carriers: DataFrame,
    partitions: int,
    *,
    gc_horizon_millis: int | None = None,
    depth: int = DEFAULT_DEPTH,
) -> DataFrame:
    """``FOLDED_SCHEMA`` rows: see the module docstring. Split them with :func:`snapshot_of`,
    :func:`records_of` and :func:`leaves_of`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    fold = partial(_fold_partition, gc_horizon_millis=gc_horizon_millis, depth=depth)
    return carriers.repartition(partitions, "map", "key").mapInArrow(
        fold, from_arrow_schema(FOLDED_SCHEMA)
    )


def snapshot_of(folded: DataFrame) -> DataFrame:
    return folded.where(sf.col("kind") == ROW).select(*SNAPSHOT_COLUMNS)


def records_of(folded: DataFrame) -> DataFrame:
    return folded.where(sf.col("kind") == RECORD).select(*OPS_SCHEMA.names)


def leaves_of(folded: DataFrame) -> DataFrame:
    """``(map, leaf, hash)``: each partition's share of each leaf (summed by the driver)."""
    return folded.where(sf.col("kind") == LEAF).select("map", "leaf", "hash")
