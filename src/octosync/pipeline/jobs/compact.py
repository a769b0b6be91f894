"""``octosync pipeline compact``: fold every op into the converged state of each map.

Writes ``OUT/snapshot/`` (Parquet, one row per key: ``map, key, value, millis, counter, node,
tombstone``), ``OUT/merkle/`` (Parquet, every non-zero Merkle node: ``map, path, level, hash``)
``OUT/records/`` (Parquet, the op records that still carry state, in the ops schema),
``OUT/documents/`` and ``OUT/documents.json`` (shared documents: each kind's converged entries,
and every document's merged values) and ``OUT/compaction.json`` (the last journal seq folded
in, counts, each map's Merkle root and each shared document's entries);
the names are in ``pipeline.layout``. :func:`octosync.pipeline.resume.load_store` folds
``records/`` into an in-process ``crdt.MapStore`` and continues with the journal after
``as_of_seq``. The whole output is built beside ``OUT`` and swapped in at the end, so readers
never see a half-written compaction.

The input is read twice: once narrow (``map, key, op, seq, millis``) into a per-key summary
held in memory, which gives the totals and each key's newest LWW millisecond; once whole, where
a broadcast lookup of that summary keeps only the carriers (the rows at each key's newest
millisecond, plus any OR and counter ops) before anything is shuffled. (One pass is not
cheaper in Spark: a per-key ``max`` over a struct holding strings and bytes cannot use the hash
aggregate, and the sort-based one sorts every op.) Keys written only by LWW ops, almost always
all of them, converge in Spark SQL (``transforms.lww``: a ``max`` over about one carrier per
key; up to ``lww.DRIVER_MERKLE_KEYS`` keys the winners are collected to the driver in one
action, which writes their snapshot, records and Merkle leaves with pyarrow, instead of caching
them for three Spark writes); keys with OR or counter ops are folded by
``crdt.fold.MapStore`` per partition (``transforms.fold``). Either way only the winners are
hashed, and the driver builds the Merkle levels above the leaves.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from pyspark.sql import functions as sf

from octosync.pipeline.connect import parallelism
from octosync.pipeline.inputs import ops_rows, read_dataset, read_ops, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage
from octosync.pipeline.layout import (
    DOCUMENT_VALUES_FILE,
    DOCUMENTS_DIR,
    MERKLE_DIR,
    META_FILE,
    RECORDS_DIR,
    SNAPSHOT_DIR,
)
from octosync.pipeline.transforms import documents, lww
from octosync.pipeline.transforms import ops as tf_ops
from octosync.pipeline.transforms.fold import fold_carriers, leaves_of, records_of, snapshot_of
from octosync.pipeline.transforms.merkle import merkle_roots, tree_table
from octosync.store.op_table import OPS_SCHEMA


class CompactResult(msgspec.Struct, frozen=True):
    as_of_seq: int
    ops: int
    rows: int
    roots: dict[str, int]
    out: str


def restore_interrupted_swap(out: Path) -> None:
    """A crash between the two renames of ``swap_in`` leaves ``out`` missing and the previous
    output beside it: put that back (the job that was swapping in re-runs)."""
    old = out.with_name(f".{out.name}.old")
    if not out.exists() and old.exists():
        old.rename(out)


def swap_in(staging: Path, out: Path) -> None:
    restore_interrupted_swap(out)
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def _union(frames: list[Any]) -> Any:
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _write(frames: list[Any], path: Path) -> None:
    """Spark writes the union of ``frames`` to ``path`` (nothing when there are none)."""
    if frames:
        _union(frames).write.mode("overwrite").parquet(str(path))


DRIVER_PART = "part-driver.parquet"


def _write_driver_part(table: Any, path: Path) -> None:
    """Adds ``table`` (built on the driver) to the Parquet directory ``path`` as one file."""
    import pyarrow.parquet as pq

    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / DRIVER_PART)


def _parquet_rows(path: Path) -> int:
    """Rows of a Parquet directory, from the files' footers (no Spark job)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(path.glob("*.parquet")))


def run(
    spark: Any,
    journal: Path,
    out: Path,
    *,
    as_of_seq: int | None = None,
    gc_horizon_millis: int | None = None,
    progress: Progress = quiet,
) -> CompactResult:
    journal, out = Path(journal).resolve(), Path(out).resolve()  # a Connect server reads them
    with stage("read journal", journal, progress):
        source = resolve_export(journal, progress)
        ops = tf_ops.as_of(read_ops(spark, source), as_of_seq)
    return compact_ops(
        spark,
        ops,
        out,
        source,
        gc_horizon_millis=gc_horizon_millis,
        progress=progress,
        input_ops=ops_rows(source),
        extra=documents_writer(spark, source, as_of_seq, progress),
    )


def documents_writer(
    spark: Any, source: Path, as_of_seq: int | None, progress: Progress = quiet
) -> Extra:
    """Writes the shared documents' converged entries and merged values (up to ``as_of_seq``)
    into the staging directory; their entry counts go into the meta file."""

    def read(name: str) -> Any:
        return tf_ops.as_of(read_dataset(spark, source, name), as_of_seq)

    def write(staging: Path) -> dict[str, Any]:
        with stage("shared documents", source, progress):
            entries: dict[str, int] = {}
            for kind in documents.KINDS:
                state = kind.entries(read(kind.dataset)).cache()
                state.write.mode("overwrite").parquet(str(staging / DOCUMENTS_DIR / kind.dataset))
                for row in state.groupBy("stream").count().collect():
                    entries[row["stream"]] = entries.get(row["stream"], 0) + int(row["count"])
                state.unpersist()
            values: dict[str, dict[str, dict[str, Any]]] = {}
            for document, name, kind_name, value in documents.all_values(read):
                values.setdefault(document, {}).setdefault(name, {})[kind_name] = value
            (staging / DOCUMENT_VALUES_FILE).write_text(json.dumps(values, indent=2) + "\n")
            progress(f"{len(values)} shared documents, {sum(entries.values())} entries")
        return {"documents": dict(sorted(entries.items()))}

    return write


Extra = Callable[[Path], dict[str, Any]]
"""Writes more into the staging directory before the swap; returns fields for the meta file."""


def compact_ops(
    spark: Any,
    ops: Any,
    out: Path,
    source: Path,
    *,
    gc_horizon_millis: int | None = None,
    progress: Progress = quiet,
    ops_total: int | None = None,
    seq_before: int = 0,
    extra: Extra | None = None,
    input_ops: int | None = None,
) -> CompactResult:
    """Compact the op records of the DataFrame ``ops`` (``OPS_SCHEMA``) into ``out``.

    The continuous job passes the records of the last compaction plus the new ops: it says
    how many journal ops that stands for (``ops_total``) and the seq the last compaction
    reached (``seq_before``, never gone below). ``extra`` adds its files to the same swap.
    ``input_ops`` (the rows of ``ops``, when known without a job) lets a small input take the
    one-pass plan."""
    import pyarrow.parquet as pq

    out = Path(out).resolve()
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    cached: list[Any] = []
    try:
        with stage("summarise ops", source, progress):
            one_pass = None  # the per-key summary and LWW winners, collected in one action
            if input_ops is not None and input_ops <= min(lww.ONE_PASS_OPS, lww.DRIVER_MERKLE_KEYS):
                one_pass = lww.summary_with_winners(ops).toArrow()
                t = tf_ops.totals_of_table(one_pass)
                if t.families - {"lww"}:  # OR or counter ops: the two-pass plan folds them
                    one_pass = None
            if one_pass is None:
                summary = tf_ops.key_summary(ops).persist()
                cached.append(summary)
                t = tf_ops.totals(summary)
            progress(
                f"{t.ops} ops on {t.keys} keys up to seq {t.last_seq}; "
                f"families: {', '.join(sorted(t.families))}"
            )
        with stage("fold ops into state", source, progress):
            mixed = bool(t.families - {"lww"})
            on_driver = one_pass is not None or t.keys <= lww.DRIVER_MERKLE_KEYS
            snapshots, records, leaves = [], [], []
            if one_pass is not None:
                won = one_pass.select(OPS_SCHEMA.names)
            else:
                carriers = tf_ops.carriers(ops, summary, t)
                if mixed:  # read by both paths below: filter the input once
                    carriers = carriers.persist()
                    cached.append(carriers)
                in_python = sf.col(tf_ops.IN_PYTHON)
                wins = lww.winners(carriers.where(~in_python) if mixed else carriers)
            if on_driver:  # one action: every LWW output is built from the collected winners
                if one_pass is None:
                    won = wins.toArrow()
                live_won = lww.surviving_table(won, gc_horizon_millis)
            else:
                wins = wins.persist()
                cached.append(wins)
                live = lww.surviving(wins, gc_horizon_millis)
                snapshots.append(lww.snapshot(live))
                records.append(wins.select(*OPS_SCHEMA.names))
                leaves.append(lww.leaves(live))
            partitions = 0
            if mixed:
                partitions = t.fold_partitions(parallelism(spark))
                python_keys = carriers.where(in_python).drop(tf_ops.IN_PYTHON)
                folded = fold_carriers(
                    python_keys, partitions, gc_horizon_millis=gc_horizon_millis
                ).persist()
                cached.append(folded)
                snapshots.append(snapshot_of(folded))
                records.append(records_of(folded))
                leaves.append(leaves_of(folded))
            _write(snapshots, staging / SNAPSHOT_DIR)
            if on_driver:
                _write_driver_part(lww.snapshot_table(live_won), staging / SNAPSHOT_DIR)
            rows = _parquet_rows(staging / SNAPSHOT_DIR)
            how = f"; keys with OR or counter ops in {partitions} fold partitions" if mixed else ""
            progress(f"{rows} rows in the snapshot{how}")
        with stage("merkle tree", source, progress):
            parts: list[tuple[str, int, int]] = []
            if on_driver:
                for batch in lww.leaf_sums(live_won.select(lww.LEAF_INPUT).to_batches()):
                    columns = (batch.column(c).to_pylist() for c in lww.LEAF_SCHEMA.names)
                    parts += zip(*columns, strict=True)
            if leaves:
                parts += [(r["map"], r["leaf"], r["hash"]) for r in _union(leaves).collect()]
            tree = tree_table(parts)
            (staging / MERKLE_DIR).mkdir(parents=True)
            pq.write_table(tree, staging / MERKLE_DIR / "part-00000.parquet")
            roots = merkle_roots(tree)
        with stage("state records", source, progress):
            _write(records, staging / RECORDS_DIR)
            if on_driver:
                _write_driver_part(lww.records_table(won), staging / RECORDS_DIR)
    finally:
        for df in cached:
            df.unpersist()
    with stage("write result", out, progress):
        as_of, n_ops = max(t.last_seq, seq_before), t.ops if ops_total is None else ops_total
        meta = {
            "as_of_seq": as_of,
            "ops": n_ops,
            "rows": rows,
            "gc_horizon_millis": gc_horizon_millis,
            "merkle_roots": dict(sorted(roots.items())),
        }
        if extra is not None:
            meta |= extra(staging)
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        swap_in(staging, out)
    progress(f"done: {out}")
    return CompactResult(as_of, n_ops, rows, roots, str(out))
