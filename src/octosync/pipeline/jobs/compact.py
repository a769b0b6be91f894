"""``octosync pipeline compact``: fold every op into the converged state of each map.

Writes ``OUT/snapshot/`` (Parquet, one row per key: ``map, key, value, millis, counter, node,
tombstone``), ``OUT/merkle/`` (Parquet, every non-empty Merkle node: ``map, path, level, hash``)
``OUT/records/`` (Parquet, the op records that still carry state, in the ops schema) and
``OUT/compaction.json`` (the last journal seq folded in, counts, and each map's Merkle root).
:func:`octosync.pipeline.resume.load_store` folds ``records/`` into an in-process
``crdt.MapStore`` and continues with the journal after ``as_of_seq``.
The whole output is built beside ``OUT`` and swapped in at the end, so readers never see a
half-written compaction.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec

from octosync.pipeline import transforms
from octosync.pipeline.inputs import read_ops, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage

SNAPSHOT_DIR = "snapshot"
MERKLE_DIR = "merkle"
RECORDS_DIR = "records"
META_FILE = "compaction.json"


class CompactResult(msgspec.Struct, frozen=True):
    as_of_seq: int
    ops: int
    rows: int
    roots: dict[str, int]
    out: str


def _swap_in(staging: Path, out: Path) -> None:
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def run(
    spark: Any,
    journal: Path,
    out: Path,
    *,
    as_of_seq: int | None = None,
    gc_horizon_millis: int | None = None,
    progress: Progress = quiet,
) -> CompactResult:
    from pyspark.sql import functions as sf

    journal, out = Path(journal), Path(out)
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    with stage("read journal", journal, progress):
        source = resolve_export(journal, progress)
        ops = transforms.as_of(read_ops(spark, source), as_of_seq)
        stats = ops.groupBy("op").agg(sf.count("*").alias("n"), sf.max("seq").alias("last"))
        by_op = stats.collect()
        n_ops = sum(int(r["n"]) for r in by_op)
        last = max((int(r["last"]) for r in by_op), default=0)
        families = transforms.families_of(r["op"] for r in by_op)
        progress(f"{n_ops} ops up to seq {last}; families: {', '.join(sorted(families))}")
    with stage("fold ops into state", source, progress):
        winners = transforms.lww_winners(ops).persist()
        lww = transforms.lww_rows(winners)
        snapshot = transforms.compact(
            ops, gc_horizon_millis=gc_horizon_millis, lww=lww, families=families
        )
        snapshot.write.mode("overwrite").parquet(str(staging / SNAPSHOT_DIR))
        written = spark.read.parquet(str(staging / SNAPSHOT_DIR))
        rows = written.count()
        progress(f"{rows} rows in the snapshot")
    with stage("merkle tree", source, progress):
        entries = transforms.entry_hashes(
            ops, lww=lww, families=families, gc_horizon_millis=gc_horizon_millis
        ).persist()  # the leaves and the upper levels both read it
        tree = transforms.merkle_tree(entries)
        tree.coalesce(1).write.mode("overwrite").parquet(str(staging / MERKLE_DIR))
        roots_df = transforms.merkle_roots(spark.read.parquet(str(staging / MERKLE_DIR)))
        roots = {r["map"]: int(r["root"]) for r in roots_df.collect()}
        entries.unpersist()
    with stage("state records", source, progress):
        records = transforms.state_records(ops, winners, families)
        records.write.mode("overwrite").parquet(str(staging / RECORDS_DIR))
        winners.unpersist()
    with stage("write result", out, progress):
        meta = {
            "as_of_seq": last,
            "ops": n_ops,
            "rows": rows,
            "gc_horizon_millis": gc_horizon_millis,
            "merkle_roots": dict(sorted(roots.items())),
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        _swap_in(staging, out)
    progress(f"done: {out}")
    return CompactResult(last, n_ops, rows, roots, str(out))
