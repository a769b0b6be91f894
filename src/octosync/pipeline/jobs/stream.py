"""``octosync pipeline stream``: compaction and the report's counts, kept up with the journal
by a Structured Streaming query.

The query reads the journal as streams (``journal_source``: the offset is the journal's
``seq``): the op records, and the hub's stream frames and the chain face's and dataspace face's
records as count rows (:func:`count_rows`), in one union, so one micro-batch covers the same
seqs of each and one checkpoint holds every offset. Each micro-batch goes to
:func:`apply_batch`, which folds the batch's ops into the last compaction (its ``records/``:
the op records that still carry state, so folding them with new ops gives the compaction of
everything) and adds the batch's counts to the aggregate tables (``aggregates/``: ops per UTC
minute per map and per origin, ops per key; stream frames per minute per stream; chain events
per device and per name, state changes per minute, dataspace activity per label and action).
Compaction, tables and the batch's id go into ``OUT`` in one atomic swap (a batch without ops
links the last compaction's files into the new output).

Exactly once, by offsets: Spark writes a batch's seq range to the checkpoint's offset log
before running it and marks it done in the commit log after :func:`apply_batch` returns; a
restart re-runs an unfinished batch with the same range. ``OUT/compaction.json`` holds the id
of the last batch swapped in, so a batch that was swapped in before the crash but not yet
marked done is skipped, not counted again; one that was not swapped in runs from the same
previous output. Either way every op is folded and counted once, whatever moment a
``kill -9`` hits. The query registers the seq its commit log has reached under the journal's
data directory (:func:`record_progress`, at start and before each batch), and the journal's
trim keeps every record after it, so a stream that is down finds its records when restarted.

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
from octosync.pipeline.jobs.compact import (
    CompactResult,
    compact_ops,
    restore_interrupted_swap,
    swap_in,
)
from octosync.pipeline.journal_source import NAME, register
from octosync.pipeline.layout import MERKLE_DIR, META_FILE, RECORDS_DIR, SNAPSHOT_DIR
from octosync.pipeline.transforms import activity

AGGREGATES_DIR: Final = "aggregates"
BATCH_FIELD: Final = "stream_batch"
TABLES: Final = {
    "ops_by_map": ("minute_ms", "map"),
    "ops_by_origin": ("minute_ms", "origin"),
    "ops_by_key": ("map", "key"),
}
"""Each op table and its key columns; the count column is ``ops``."""
DRIVER_FOLD_RECORDS: Final = 1_000_000
"""A batch is folded on the driver when the records it joins plus its ops are at most this
many (about 200 MB of Arrow at the synthetic data's sizes); else by Spark's compaction."""


MAX_RECORDS: Final = 200_000
"""Journal seqs per micro-batch by default: a batch is collected to the driver, so it is
bounded (a stream catching up runs several)."""
ACTIVITY_TABLES: Final = {
    "chain_events_by_device": ("chain", "device"),
    "chain_events_by_name": ("chain", "name"),
    "chain_states_by_minute": ("minute_ms", "chain"),
    "dataspace_by_label": ("dataspace", "label", "action"),
    "frames_by_stream": ("minute_ms", "stream"),
}
"""Each table of the other records and its key columns (minute of ``recorded_ms``, UTC); the
count column is ``events``."""
COUNTED_IN: Final = {
    "frames": ("frames_by_stream",),
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
    """The batch's op counts per table (``ops``: an Arrow table of op rows), on the driver."""
    import numpy as np
    import pyarrow as pa

    millis = ops.column("millis").to_numpy()
    rows = ops.select(["map", "origin", "key"]).append_column(
        "minute_ms", pa.array(millis - np.mod(millis, activity.MINUTE_MS), pa.int64())
    )
    out = {}
    for name, keys in TABLES.items():
        summed = rows.group_by(list(keys)).aggregate([([], "count_all")])
        out[name] = summed.rename_columns([*keys, "ops"])
    return out


def _activity_counts(counts: Any) -> dict[str, Any]:
    """The batch's count rows summed per activity table, as Arrow tables with the table's
    own column names (small: devices, names, labels touched)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    group = [TABLE_COLUMN, "minute_ms", *KEY_COLUMNS]
    counts = counts.select(group).group_by(group).aggregate([([], "count_all")])
    out = {}
    for name, keys in ACTIVITY_TABLES.items():
        rows = counts.filter(pc.equal(counts.column(TABLE_COLUMN), name))
        strings = iter(KEY_COLUMNS)
        columns = {k: rows.column("minute_ms" if k == "minute_ms" else next(strings)) for k in keys}
        out[name] = pa.table({**columns, "events": rows.column("count_all")})
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
    batch: Any,
    batch_id: int,
    *,
    journal: Path,
    out: Path,
    progress: Progress = quiet,
    driver_fold: int = DRIVER_FOLD_RECORDS,
) -> bool:
    """Fold one micro-batch into ``out``; False when it was already swapped in (or held
    nothing). ``batch`` holds op rows, and, from the query, count rows (:func:`count_rows`:
    ``table`` set). It is collected to the driver in one job (a micro-batch is bounded by
    ``maxRecordsPerBatch``) and folded there when the records it joins plus its ops are at
    most ``driver_fold``, else by Spark's compaction."""
    restore_interrupted_swap(out)
    meta = read_meta(out)
    if int(meta.get(BATCH_FIELD, -1)) >= batch_id:
        progress(f"batch {batch_id}: already in {out}, skipped")
        return False
    return _apply(batch, batch_id, meta, journal, out, progress, driver_fold)


def _apply(
    batch: Any,
    batch_id: int,
    meta: dict[str, Any],
    journal: Path,
    out: Path,
    progress: Progress,
    driver_fold: int,
) -> bool:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from octosync.store.op_table import OPS_SCHEMA

    table = batch.toArrow()
    progress(f"batch {batch_id}: {table.num_rows} rows read")
    activity_counts: dict[str, Any] = {}
    if TABLE_COLUMN in table.column_names:
        is_count = pc.is_valid(table.column(TABLE_COLUMN))
        activity_counts = _activity_counts(table.filter(is_count))
        table = table.filter(pc.invert(is_count))
    ops = table.select(OPS_SCHEMA.names).cast(OPS_SCHEMA)
    n_new = ops.num_rows
    n_activity = sum(sum(t.column("events").to_pylist()) for t in activity_counts.values())
    if n_new == 0 and n_activity == 0:
        progress(f"batch {batch_id}: nothing new")
        return False
    counts = _batch_counts(ops) if n_new else {}
    counts |= {name: t for name, t in activity_counts.items() if t.num_rows}
    merged = {name: _merged(out, name, t) for name, t in counts.items()}

    def extra(staging: Path) -> dict[str, Any]:
        tables = staging / AGGREGATES_DIR
        tables.mkdir(exist_ok=True)
        held = out / AGGREGATES_DIR
        for path in sorted(held.glob("*.parquet")) if held.is_dir() else []:
            if path.stem not in merged and not (tables / path.name).exists():
                os.link(path, tables / path.name)  # a table this batch did not add to
        for name, t in merged.items():
            target = tables / f"{name}.parquet"
            target.unlink(missing_ok=True)  # may be a link to the live output's file
            pq.write_table(t, target)
        return {BATCH_FIELD: batch_id}

    what = f"batch {batch_id}: {n_new} ops, {n_activity} frame, chain and dataspace counts"
    if n_new == 0:
        cached = _FOLDS.pop(str(out), None)
        _swap_without_ops(out, meta, extra)
        if cached is not None and cached[0] == meta.get(BATCH_FIELD):
            _FOLDS[str(out)] = (batch_id, cached[1])  # the same state, the new batch's id
        progress(what)
        return True
    held = int(meta.get("records", driver_fold + 1 if meta else 0))
    if held + n_new <= driver_fold:
        result = fold_on_driver(ops, out, meta, extra, batch_id)
        how = "on the driver"
    else:
        _FOLDS.pop(str(out), None)
        spark = batch.sparkSession
        new = spark.createDataFrame(ops)
        if (out / RECORDS_DIR).exists():
            new = read_ops(spark, out / RECORDS_DIR).unionByName(new)
        result = compact_ops(
            spark,
            new,
            out,
            journal,
            ops_total=int(meta.get("ops", 0)) + n_new,
            seq_before=int(meta.get("as_of_seq", 0)),
            extra=lambda staging: extra(staging) | {"records": _records_in(staging)},
        )
        how = "by Spark"
    progress(f"{what}; {result.ops} ops up to seq {result.as_of_seq} in {result.rows} rows, {how}")
    return True


def _records_in(staging: Path) -> int:
    import pyarrow.parquet as pq

    path = staging / RECORDS_DIR
    return sum(pq.ParquetFile(f).metadata.num_rows for f in path.glob("*.parquet"))


_FOLDS: dict[str, tuple[int, Any]] = {}
"""Per output directory, the driver's fold (``transforms.fold.Folder``) and the batch id of
the output it equals: the next batch adds its ops to it instead of folding ``records/``
again. Taken out while a batch changes it, put back once the batch is swapped in, so a
failed batch leaves none (the next one folds ``records/``)."""


def fold_on_driver(
    ops: Any, out: Path, meta: dict[str, Any], extra: Any, batch_id: int
) -> CompactResult:
    """The compaction of the last one's ``records/`` plus ``ops`` (an Arrow table), folded by
    ``crdt.fold.MapStore`` on the driver as Spark's fold partitions do
    (``transforms.fold``), written with pyarrow and swapped in like a compaction."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from octosync.pipeline.transforms.fold import Folder
    from octosync.pipeline.transforms.merkle import merkle_roots, tree_table
    from octosync.store.op_table import OPS_SCHEMA

    cached = _FOLDS.pop(str(out), None)
    if cached is not None and cached[0] == meta.get(BATCH_FIELD):
        folder = cached[1]
    else:
        folder = Folder()
        if (out / RECORDS_DIR).exists():
            held = pq.read_table(out / RECORDS_DIR).select(OPS_SCHEMA.names).cast(OPS_SCHEMA)
            for part in held.to_batches():
                folder.add(part)
    for part in ops.to_batches():
        folder.add(part)
    snapshot, records, leaves = folder.tables()
    tree = tree_table(leaves)
    roots = merkle_roots(tree)
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    for sub, t in ((SNAPSHOT_DIR, snapshot), (RECORDS_DIR, records), (MERKLE_DIR, tree)):
        (staging / sub).mkdir(parents=True)
        pq.write_table(t, staging / sub / "part-driver.parquet")
    last_seq = int(pc.max(ops.column("seq")).as_py())
    result = CompactResult(
        max(last_seq, int(meta.get("as_of_seq", 0))),
        int(meta.get("ops", 0)) + ops.num_rows,
        snapshot.num_rows,
        roots,
        str(out),
    )
    new_meta = {
        "as_of_seq": result.as_of_seq,
        "ops": result.ops,
        "rows": result.rows,
        "gc_horizon_millis": None,
        "merkle_roots": dict(sorted(roots.items())),
        "records": records.num_rows,
    } | extra(staging)
    (staging / META_FILE).write_text(json.dumps(new_meta, indent=2) + "\n")
    swap_in(staging, out)
    _FOLDS[str(out)] = (batch_id, folder)
    return result


def _swap_without_ops(out: Path, meta: dict[str, Any], extra: Any) -> None:
    """The last compaction, linked file by file (Parquet files are never rewritten), with the
    new tables and batch id, swapped in like a compaction."""
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    if out.exists():
        shutil.copytree(out, staging, copy_function=os.link)
    else:
        staging.mkdir(parents=True)
        meta = {"as_of_seq": 0, "ops": 0, "rows": 0, "merkle_roots": {}, "records": 0}
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
    driver_fold: int = DRIVER_FOLD_RECORDS,
) -> Any:
    """Start the query (a ``StreamingQuery``): a batch every ``interval`` seconds; with
    ``once`` only up to the journal's latest seq now (:func:`wait_until_done` stops it)."""
    journal, out, checkpoint = Path(journal).resolve(), Path(out).resolve(), Path(checkpoint)
    checkpoint = checkpoint.resolve()
    record_progress(journal, checkpoint)  # from now on a trim waits for this query
    register(spark)
    end: dict[str, str] = {}
    if once:  # up to the journal's latest seq now, in bounded batches; see wait_until_done
        from octosync.store.journal import Journal

        with Journal(journal, readonly=True) as j:
            end = {"endSeq": str(max(1, j.latest_seq()))}

    def source(kind: str) -> Any:
        reader = spark.readStream.format(NAME).option("kind", kind).options(**end)
        reader = reader.option("maxRecordsPerBatch", str(max_records or MAX_RECORDS))
        return reader.load(str(journal))

    rows = source("ops")
    for kind in COUNTED_IN:
        rows = rows.unionByName(count_rows(source(kind), kind), allowMissingColumns=True)

    def each(batch: Any, batch_id: int) -> None:
        record_progress(journal, checkpoint)  # the batches before this one are committed
        apply_batch(
            batch, batch_id, journal=journal, out=out, progress=progress, driver_fold=driver_fold
        )

    writer = (
        rows.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .queryName("octosync-compact")
    )
    return writer.trigger(processingTime=f"{interval} seconds").start()


def committed_seq(checkpoint: Path) -> int:
    """The seq up to which every source of the query has read and committed: the end offsets
    of the last batch in the checkpoint's commit log (0 before the first, or when the
    offset log cannot be read: a trim then keeps everything)."""
    commits = Path(checkpoint) / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not done:
        return 0
    try:
        lines = (Path(checkpoint) / "offsets" / str(max(done))).read_text().splitlines()
        seqs = [int(json.loads(line)["seq"]) for line in lines[2:] if line.strip()]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return min(seqs, default=0)


def record_progress(journal: Path, checkpoint: Path) -> int:
    """Register the query under ``journal`` with the seq its checkpoint has committed
    (``store.stream_progress``: the journal's trim keeps every record after it); returns it."""
    import hashlib

    from octosync.store import stream_progress

    checkpoint = Path(checkpoint).resolve()
    reader = "stream-" + hashlib.sha256(str(checkpoint).encode()).hexdigest()[:16]
    seq = committed_seq(checkpoint)
    stream_progress.record(journal, reader, str(checkpoint), seq)
    return seq


NO_DATA: Final = "Waiting for data to arrive"
"""A micro-batch query's status message when its last look found nothing new."""


def wait_until_done(query: Any, poll: float = 0.2) -> None:
    """Wait for a query started with ``once`` to reach the seq it stops at, then stop it.
    (Spark's own run-what-is-there triggers ignore a Python source's batch limit, so a long
    journal would come as one batch collected on the driver.)"""
    import time

    while query.isActive:
        status = query.status
        if status["message"] == NO_DATA and not status["isTriggerActive"]:
            query.stop()
            return
        time.sleep(poll)
