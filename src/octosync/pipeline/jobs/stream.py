"""``octosync pipeline stream``: compaction and the report's counts, kept up with the journal
by a Structured Streaming query.

The query reads the journal as streams (``journal_source``: the offset is the journal's
``seq``): the op records, and the chain face's and dataspace face's records as count rows
(:func:`count_rows`), in one union, so one micro-batch covers the same seqs of each and one
checkpoint holds every offset. Each micro-batch goes to :func:`apply_batch`, which folds the
batch's ops into the last compaction (its ``records/``: the op records that still carry state,
so folding them with new ops gives the compaction of everything) and adds the batch's counts
to the aggregate tables (``aggregates/``: ops per UTC minute per map and per origin, ops per
key; chain events per device and per name, state changes per minute, dataspace activity per
label and action). Compaction, tables and the batch's id go into ``OUT`` in one atomic swap (a
batch without ops links the last compaction's files into the new output).

Exactly once, by offsets: Spark writes a batch's seq range to the checkpoint's offset log
before running it and marks it done in the commit log after :func:`apply_batch` returns; a
restart re-runs an unfinished batch with the same range. ``OUT/compaction.json`` holds the id
of the last batch swapped in, so a batch that was swapped in before the crash but not yet
marked done is skipped, not counted again; one that was not swapped in runs from the same
previous output. Either way every op is folded and counted once, whatever moment a
``kill -9`` hits.

The aggregate tables count journal records: an op journaled twice (a client that re-sent it),
or a chain event a device re-sent on a new connection, counts twice here, while ``pipeline
report`` counts distinct ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Final

from octosync.pipeline.inputs import read_ops
from octosync.pipeline.jobs._stages import Progress, quiet
from octosync.pipeline.jobs.compact import compact_ops, restore_interrupted_swap, swap_in
from octosync.pipeline.journal_source import NAME, register
from octosync.pipeline.layout import META_FILE, RECORDS_DIR
from octosync.pipeline.transforms import activity

AGGREGATES_DIR: Final = "aggregates"
BATCH_FIELD: Final = "stream_batch"
TABLES: Final = {
    "ops_by_map": ("minute_ms", "map"),
    "ops_by_origin": ("minute_ms", "origin"),
    "ops_by_key": ("map", "key"),
}
"""Each op table and its key columns; the count column is ``ops``."""
ACTIVITY_TABLES: Final = {
    "chain_events_by_device": ("chain", "device"),
    "chain_events_by_name": ("chain", "name"),
    "chain_states_by_minute": ("minute_ms", "chain"),
    "dataspace_by_label": ("dataspace", "label", "action"),
}
"""Each table of the chain and dataspace records and its key columns (minute of
``recorded_ms``, UTC); the count column is ``events``."""
COUNTED_IN: Final = {
    "chain_events": ("chain_events_by_device", "chain_events_by_name"),
    "chain_states": ("chain_states_by_minute",),
    "dataspace": ("dataspace_by_label",),
}
"""The tables each activity dataset counts in."""
TABLE_COLUMN: Final = "table"
KEY_COLUMNS: Final = ("k1", "k2", "k3")


def count_rows(rows: Any, kind: str) -> Any:
    """A count row (``table``, ``minute_ms``, ``k1``..``k3``) per activity table a record
    of ``kind`` counts in: the table's string keys in order, null where it has fewer."""
    from pyspark.sql import functions as sf

    out = None
    for name in COUNTED_IN[kind]:
        keys = ACTIVITY_TABLES[name]
        strings = [k for k in keys if k != "minute_ms"]
        cols = [sf.col(k).cast("string") for k in strings]
        cols += [sf.lit(None).cast("string")] * (len(KEY_COLUMNS) - len(cols))
        minute = activity.minute_of("recorded_ms") if "minute_ms" in keys else sf.lit(None)
        one = rows.select(
            sf.lit(name).alias(TABLE_COLUMN),
            minute.cast("long").alias("minute_ms"),
            *(c.alias(k) for c, k in zip(cols, KEY_COLUMNS, strict=True)),
        )
        out = one if out is None else out.unionByName(one)
    assert out is not None
    return out


def read_meta(out: Path) -> dict[str, Any]:
    path = Path(out) / META_FILE
    if not path.exists():
        return {}
    meta: dict[str, Any] = json.loads(path.read_text())
    return meta


def _batch_counts(ops: Any) -> dict[str, Any]:
    """The batch's counts per table, as Arrow tables (small: minutes x maps, keys touched)."""
    return {
        "ops_by_map": activity.per_minute(ops, "millis", "map", "ops").toArrow(),
        "ops_by_origin": activity.per_minute(ops, "millis", "origin", "ops").toArrow(),
        "ops_by_key": ops.groupBy("map", "key").count().withColumnRenamed("count", "ops").toArrow(),
    }


def _activity_counts(counts: Any) -> dict[str, Any]:
    """The batch's count rows summed per activity table, as Arrow tables with the table's
    own column names (small: devices, names, labels touched)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = {}
    for name, keys in ACTIVITY_TABLES.items():
        rows = counts.filter(pc.equal(counts.column(TABLE_COLUMN), name))
        strings = iter(KEY_COLUMNS)
        columns = {k: rows.column("minute_ms" if k == "minute_ms" else next(strings)) for k in keys}
        out[name] = pa.table({**columns, "events": rows.column("count")})
    return out


def _merged(out: Path, name: str, batch: Any) -> Any:
    """The table in ``out`` plus the batch's counts, summed per key (on the driver)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(TABLES.get(name) or ACTIVITY_TABLES[name])
    count = "ops" if name in TABLES else "events"
    path = Path(out) / AGGREGATES_DIR / f"{name}.parquet"
    types = {k: pa.int64() if k == "minute_ms" else pa.string() for k in keys}
    batch = batch.select([*keys, count]).cast(
        pa.schema([*(pa.field(k, types[k]) for k in keys), pa.field(count, pa.int64())])
    )
    if path.exists():
        batch = pa.concat_tables([pq.read_table(path).cast(batch.schema), batch])
    summed = batch.group_by(keys).aggregate([(count, "sum")]).rename_columns([*keys, count])
    return summed.sort_by([(k, "ascending") for k in keys])


def apply_batch(
    batch: Any, batch_id: int, *, journal: Path, out: Path, progress: Progress = quiet
) -> bool:
    """Fold one micro-batch into ``out``; False when it was already swapped in (or held
    nothing). ``batch`` holds op rows, and, from the query, count rows (:func:`count_rows`:
    ``table`` set)."""
    restore_interrupted_swap(out)
    meta = read_meta(out)
    if int(meta.get(BATCH_FIELD, -1)) >= batch_id:
        progress(f"batch {batch_id}: already in {out}, skipped")
        return False
    batch = batch.persist()  # read by several jobs below: decode the journal once
    try:
        return _apply(batch, batch_id, meta, journal=journal, out=out, progress=progress)
    finally:
        batch.unpersist()


def _apply(
    batch: Any, batch_id: int, meta: dict[str, Any], *, journal: Path, out: Path, progress: Progress
) -> bool:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as sf

    from octosync.store.op_table import OPS_SCHEMA

    spark = batch.sparkSession
    activity_counts: dict[str, Any] = {}
    if TABLE_COLUMN in batch.columns:
        is_count = sf.col(TABLE_COLUMN).isNotNull()
        rows = batch.where(is_count).groupBy(TABLE_COLUMN, "minute_ms", *KEY_COLUMNS).count()
        activity_counts = _activity_counts(rows.toArrow())
        batch = batch.where(~is_count).select(*OPS_SCHEMA.names)
    counts = _batch_counts(batch)
    n_new = sum(counts["ops_by_map"].column("ops").to_pylist())
    n_activity = sum(sum(t.column("events").to_pylist()) for t in activity_counts.values())
    if n_new == 0 and n_activity == 0:
        progress(f"batch {batch_id}: nothing new")
        return False
    counts |= {name: t for name, t in activity_counts.items() if t.num_rows}
    merged = {name: _merged(out, name, table) for name, table in counts.items()}

    def extra(staging: Path) -> dict[str, Any]:
        (staging / AGGREGATES_DIR).mkdir(exist_ok=True)
        for name, table in merged.items():
            pq.write_table(table, staging / AGGREGATES_DIR / f"{name}.parquet")
        return {BATCH_FIELD: batch_id}

    if n_new == 0:
        _swap_without_ops(out, meta, extra)
        progress(f"batch {batch_id}: {n_activity} chain and dataspace counts, no ops")
        return True
    ops = batch
    if (out / RECORDS_DIR).exists():
        ops = read_ops(spark, out / RECORDS_DIR).unionByName(batch)
    result = compact_ops(
        spark,
        ops,
        out,
        journal,
        ops_total=int(meta.get("ops", 0)) + n_new,
        seq_before=int(meta.get("as_of_seq", 0)),
        extra=extra,
    )
    progress(
        f"batch {batch_id}: {n_new} ops, {n_activity} chain and dataspace counts; {result.ops} "
        f"ops up to seq {result.as_of_seq} in {result.rows} rows"
    )
    return True


def _swap_without_ops(out: Path, meta: dict[str, Any], extra: Any) -> None:
    """The last compaction, linked file by file (Parquet files are never rewritten), with the
    new tables and batch id, swapped in like a compaction."""
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    if out.exists():
        shutil.copytree(out, staging, copy_function=os.link)
    else:
        staging.mkdir(parents=True)
        meta = {"as_of_seq": 0, "ops": 0, "rows": 0, "merkle_roots": {}}
    meta = dict(meta) | extra(staging)
    (staging / META_FILE).unlink(missing_ok=True)  # a link to the old one: replace, not write
    (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    swap_in(staging, out)


def start(
    spark: Any,
    journal: Path,
    out: Path,
    checkpoint: Path,
    *,
    interval: float = 1.0,
    once: bool = False,
    max_records: int | None = None,
    progress: Progress = quiet,
) -> Any:
    """Start the query (a ``StreamingQuery``): every ``interval`` seconds, or one batch of
    everything there is with ``once``."""
    journal, out, checkpoint = Path(journal).resolve(), Path(out).resolve(), Path(checkpoint)
    register(spark)

    def source(kind: str) -> Any:
        reader = spark.readStream.format(NAME).option("kind", kind)
        if max_records:
            reader = reader.option("maxRecordsPerBatch", str(max_records))
        return reader.load(str(journal))

    rows = source("ops")
    for kind in COUNTED_IN:
        rows = rows.unionByName(count_rows(source(kind), kind), allowMissingColumns=True)

    def each(batch: Any, batch_id: int) -> None:
        apply_batch(batch, batch_id, journal=journal, out=out, progress=progress)

    writer = (
        rows.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint.resolve()))
        .queryName("octosync-compact")
    )
    writer = (
        writer.trigger(once=True) if once else writer.trigger(processingTime=f"{interval} seconds")
    )
    return writer.start()
