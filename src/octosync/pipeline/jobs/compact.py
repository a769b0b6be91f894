"""``octosync pipeline compact``: fold every op into the converged state of each map.

Writes ``OUT/snapshot/`` (Parquet, one row per key: ``map, key, value, millis, counter, node,
tombstone``), ``OUT/merkle/`` (Parquet, every non-zero Merkle node: ``map, path, level, hash``)
``OUT/records/`` (Parquet, the op records that still carry state, in the ops schema) and
``OUT/compaction.json`` (the last journal seq folded in, counts, and each map's Merkle root);
the names are in ``pipeline.layout``. :func:`octosync.pipeline.resume.load_store` folds
``records/`` into an in-process ``crdt.MapStore`` and continues with the journal after
``as_of_seq``. The whole output is built beside ``OUT`` and swapped in at the end, so readers
never see a half-written compaction.

The input is read twice: once narrow (``map, key, op, seq, millis``) into a per-key summary
held in memory, which gives the totals and each key's newest LWW millisecond; once whole, where
a broadcast lookup of that summary keeps only the carriers (the rows at each key's newest
millisecond, plus any OR and counter ops) before anything is shuffled. The carriers, about one
row per key, are folded by ``crdt.fold.MapStore`` per partition (``transforms.fold``), which
also gives the Merkle leaves; the driver builds the upper levels.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec

from octosync.pipeline.inputs import read_ops, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage
from octosync.pipeline.layout import MERKLE_DIR, META_FILE, RECORDS_DIR, SNAPSHOT_DIR
from octosync.pipeline.transforms import ops as tf_ops
from octosync.pipeline.transforms.fold import fold_carriers, leaves_of, records_of, snapshot_of
from octosync.pipeline.transforms.merkle import merkle_roots, tree_table


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
    import pyarrow.parquet as pq

    journal, out = Path(journal), Path(out)
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    summary = folded = None
    try:
        with stage("read journal", journal, progress):
            source = resolve_export(journal, progress)
            ops = tf_ops.as_of(read_ops(spark, source), as_of_seq)
            summary = tf_ops.key_summary(ops).persist()
            t = tf_ops.totals(summary)
            progress(
                f"{t.ops} ops on {t.keys} keys up to seq {t.last_seq}; "
                f"families: {', '.join(sorted(t.families))}"
            )
        with stage("fold ops into state", source, progress):
            partitions = t.fold_partitions(spark.sparkContext.defaultParallelism)
            carriers = tf_ops.carriers(ops, summary, t)
            folded = fold_carriers(
                carriers, partitions, gc_horizon_millis=gc_horizon_millis
            ).persist()
            snapshot_of(folded).write.mode("overwrite").parquet(str(staging / SNAPSHOT_DIR))
            rows = _parquet_rows(staging / SNAPSHOT_DIR)
            progress(f"{rows} rows in the snapshot ({partitions} fold partitions)")
        with stage("merkle tree", source, progress):
            leaves = leaves_of(folded).collect()
            tree = tree_table((r["map"], r["leaf"], r["hash"]) for r in leaves)
            (staging / MERKLE_DIR).mkdir(parents=True)
            pq.write_table(tree, staging / MERKLE_DIR / "part-00000.parquet")
            roots = merkle_roots(tree)
        with stage("state records", source, progress):
            records_of(folded).write.mode("overwrite").parquet(str(staging / RECORDS_DIR))
    finally:
        for df in (summary, folded):
            if df is not None:
                df.unpersist()
    with stage("write result", out, progress):
        meta = {
            "as_of_seq": t.last_seq,
            "ops": t.ops,
            "rows": rows,
            "gc_horizon_millis": gc_horizon_millis,
            "merkle_roots": dict(sorted(roots.items())),
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        _swap_in(staging, out)
    progress(f"done: {out}")
    return CompactResult(t.last_seq, t.ops, rows, roots, str(out))
