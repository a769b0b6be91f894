"""``octosync pipeline stream``: compaction and the report's op counts, kept up with the journal
by a Structured Streaming query.

The query reads the journal as a stream (``journal_source``: the offset is the journal's
``seq``) and hands each micro-batch to :func:`apply_batch`, which folds the batch's ops into
the last compaction (its ``records/``: the op records that still carry state, so folding them
with new ops gives the compaction of everything) and adds the batch's counts to the
aggregate tables (``aggregates/``: ops per UTC minute per map and per origin, ops per key).
Compaction, tables and the batch's id go into ``OUT`` in one atomic swap.

Exactly once, by offsets: Spark writes a batch's seq range to the checkpoint's offset log
before running it and marks it done in the commit log after :func:`apply_batch` returns; a
restart re-runs an unfinished batch with the same range. ``OUT/compaction.json`` holds the id
of the last batch swapped in, so a batch that was swapped in before the crash but not yet
marked done is skipped, not counted again; one that was not swapped in runs from the same
previous output. Either way every op is folded and counted once, whatever moment a
``kill -9`` hits.

The aggregate tables count journal records: an op journaled twice (a client that re-sent it)
counts twice here, while ``pipeline report`` counts distinct ops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from octosync.pipeline.inputs import read_ops
from octosync.pipeline.jobs._stages import Progress, quiet
from octosync.pipeline.jobs.compact import compact_ops, restore_interrupted_swap
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
"""Each aggregate table and its key columns; the count column is ``ops``."""


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


def _merged(out: Path, name: str, batch: Any) -> Any:
    """The table in ``out`` plus the batch's counts, summed per key (on the driver)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(TABLES[name])
    path = Path(out) / AGGREGATES_DIR / f"{name}.parquet"
    batch = batch.select([*keys, "ops"]).cast(
        pa.schema([*(batch.schema.field(k) for k in keys), pa.field("ops", pa.int64())])
    )
    if path.exists():
        batch = pa.concat_tables([pq.read_table(path).cast(batch.schema), batch])
    summed = batch.group_by(keys).aggregate([("ops", "sum")]).rename_columns([*keys, "ops"])
    return summed.sort_by([(k, "ascending") for k in keys])


def apply_batch(
    batch: Any, batch_id: int, *, journal: Path, out: Path, progress: Progress = quiet
) -> bool:
    """Fold one micro-batch of ops into ``out``; False when it was already swapped in (or held
    no ops)."""
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

    spark = batch.sparkSession
    counts = _batch_counts(batch)
    n_new = sum(counts["ops_by_map"].column("ops").to_pylist())
    if n_new == 0:
        progress(f"batch {batch_id}: no ops")
        return False
    merged = {name: _merged(out, name, table) for name, table in counts.items()}

    def extra(staging: Path) -> dict[str, Any]:
        (staging / AGGREGATES_DIR).mkdir()
        for name, table in merged.items():
            pq.write_table(table, staging / AGGREGATES_DIR / f"{name}.parquet")
        return {BATCH_FIELD: batch_id}

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
        f"batch {batch_id}: {n_new} ops; {result.ops} ops up to seq {result.as_of_seq} in "
        f"{result.rows} rows"
    )
    return True


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
    reader = spark.readStream.format(NAME)
    if max_records:
        reader = reader.option("maxRecordsPerBatch", str(max_records))

    def each(batch: Any, batch_id: int) -> None:
        apply_batch(batch, batch_id, journal=journal, out=out, progress=progress)

    writer = (
        reader.load(str(journal))
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint.resolve()))
        .queryName("octosync-compact")
    )
    writer = (
        writer.trigger(once=True) if once else writer.trigger(processingTime=f"{interval} seconds")
    )
    return writer.start()
