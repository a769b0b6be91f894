"""Pipeline benchmark: Spark compaction vs the in-process fold, and journal append throughput.

Full run (the issue's figures): 10,000,000 LWW ops, 100,000 keys with Zipf skew, 5 origins,
10% deletes, written as Parquet; ``octosync pipeline compact`` on ``local[2]`` timed as a job
and as a whole command (JVM start included); the in-process ``crdt.fold`` of the same Parquet
timed in the same run (the baseline); both results compared (rows and Merkle roots). Then
journal appends per second with group commit in both durability modes, against one commit per
append (the baseline).

    python bench/pipeline.py            # full size
    python bench/pipeline.py --quick    # 200,000 ops, a smoke run
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.pipeline.resume import fold_dataset
from octosync.store.journal import GroupCommitWriter, Journal
from octosync.store.synthetic import generate_lww_table


def generate(out: Path, n_ops: int, n_keys: int, n_origins: int, n_files: int) -> float:
    started = time.perf_counter()
    table = generate_lww_table(n_ops, n_keys=n_keys, n_origins=n_origins, delete_fraction=0.10)
    n = table.num_rows
    table = table.append_column("recorded_ms", pa.array(np.zeros(n, dtype=np.int64)))
    table = table.add_column(0, "seq", pa.array(np.arange(1, n + 1, dtype=np.int64)))
    out.mkdir(parents=True, exist_ok=True)
    per_file = -(-n // n_files)
    for i in range(n_files):
        pq.write_table(table.slice(i * per_file, per_file), out / f"part-{i:03d}.parquet")
    return time.perf_counter() - started


def spark_compact(
    ops_dir: Path, out: Path, master: str, memory: str
) -> tuple[float, float, dict[str, int]]:
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "octosync.cli",
            "pipeline",
            "compact",
            "--journal",
            str(ops_dir),
            "--out",
            str(out),
            "--master",
            master,
            "--conf",
            f"spark.driver.memory={memory}",
            "--conf",
            "spark.ui.showConsoleProgress=false",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    whole = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"compact failed:\n{proc.stderr[-4000:]}")
    job = float(re.search(r"in ([0-9.]+)s job", proc.stdout).group(1))  # type: ignore[union-attr]
    roots = json.loads((out / "compaction.json").read_text())["merkle_roots"]
    return job, whole, roots


def spark_compact_warm(ops_dir: Path, out: Path, master: str, memory: str) -> float:
    """Job time of a second compaction in one long-lived session (JIT and workers warm)."""
    from octosync.pipeline.jobs import compact
    from octosync.pipeline.spark import build_session

    conf = {"spark.driver.memory": memory, "spark.ui.showConsoleProgress": "false"}
    spark = build_session(master, conf, app_name="octosync-bench")
    try:
        compact.run(spark, ops_dir, out)
        started = time.perf_counter()
        compact.run(spark, ops_dir, out)
        return time.perf_counter() - started
    finally:
        spark.stop()


def in_process_fold(ops_dir: Path) -> tuple[float, dict[str, int], int]:
    started = time.perf_counter()
    store = fold_dataset(ops_dir)
    roots = {m: store.merkle_root(m) for m in store.maps()}
    elapsed = time.perf_counter() - started
    return elapsed, roots, len(store.snapshot_rows())


def append_throughput(tmp: Path, durability: str, n: int, threads: int) -> tuple[float, float, int]:
    """(group-commit appends/s, one-commit-per-append appends/s, commits used by group commit)."""

    def rec(i: int) -> OpRecord:
        return OpRecord(
            "m", f"k{i % 1000}", OpKind.PUT, b"\xa3abc", Timestamp(i, 0, "w"), "w", f"w:{i}"
        )

    gdir = tmp / f"group-{durability}"
    with GroupCommitWriter(gdir, durability=durability) as w:  # type: ignore[arg-type]
        per = n // threads

        def work(t: int) -> None:
            for i in range(per):
                w.append([rec(t * per + i)])

        started = time.perf_counter()
        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        group = per * threads / (time.perf_counter() - started)
        commits = w.commits
    sdir = tmp / f"single-{durability}"
    m = max(1, n // 10)
    with Journal(sdir, durability=durability) as j:  # type: ignore[arg-type]
        started = time.perf_counter()
        for i in range(m):
            j.append([rec(i)])
        single = m / (time.perf_counter() - started)
    return group, single, commits


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="200,000 ops, 20,000 keys")
    ap.add_argument("--ops", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--origins", type=int, default=5)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--appends", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--skip-fold", action="store_true", help="do not run the in-process baseline")
    args = ap.parse_args()
    if args.quick:
        args.ops, args.keys, args.appends = 200_000, 20_000, 4_000

    tmp = Path(tempfile.mkdtemp(prefix="octosync-bench-"))
    try:
        ops_dir = tmp / "ops"
        gen = generate(ops_dir, args.ops, args.keys, args.origins, args.files)
        size = sum(p.stat().st_size for p in ops_dir.iterdir()) / 2**20
        print(
            f"generated {args.ops:,} ops ({args.keys:,} keys, {args.origins} origins, 10% deletes) "
            f"as {args.files} Parquet files, {size:.0f} MiB, in {gen:.1f}s"
        )

        job, whole, spark_roots = spark_compact(
            ops_dir, tmp / "compacted", args.master, args.driver_memory
        )
        print(
            f"spark compact ({args.master}): job {job:.1f}s = {args.ops / job:,.0f} ops/s; "
            f"whole command {whole:.1f}s = {args.ops / whole:,.0f} ops/s (JVM start included)"
        )
        warm = spark_compact_warm(ops_dir, tmp / "compacted-warm", args.master, args.driver_memory)
        print(
            f"spark compact, second run in a long-lived session: job {warm:.1f}s = "
            f"{args.ops / warm:,.0f} ops/s"
        )
        if not args.skip_fold:
            fold_s, fold_roots, rows = in_process_fold(ops_dir)
            print(
                f"in-process fold (baseline, one core): {fold_s:.1f}s = "
                f"{args.ops / fold_s:,.0f} ops/s, {rows:,} rows"
            )
            print(
                f"ratio: spark job is {fold_s / job:.1f}x the in-process fold "
                f"({fold_s / whole:.1f}x counting JVM start, {fold_s / warm:.1f}x warm)"
            )
            same = fold_roots == spark_roots
            print(f"merkle roots identical: {same}")
            if not same:
                sys.exit(f"MISMATCH spark={spark_roots} fold={fold_roots}")

        for durability in ("full", "normal"):
            group, single, commits = append_throughput(tmp, durability, args.appends, args.threads)
            print(
                f"journal appends, durability={durability}: group commit ({args.threads} threads) "
                f"{group:,.0f}/s in {commits:,} commits for {args.appends:,} appends; "
                f"one commit per append (baseline) {single:,.0f}/s; ratio {group / single:.1f}x"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
