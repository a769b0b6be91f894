"""Pipeline benchmark: Spark compaction against DuckDB and the in-process fold, on one machine
and on a standalone cluster; and journal append throughput.

Full run (the issue's figures): 10,000,000 LWW ops, 100,000 keys with Zipf skew, 5 origins,
10% deletes, written as Parquet. In one run, on the same files:

* ``octosync pipeline compact --master local[2]`` as a whole command (JVM start included), with
  the CPU-seconds of every process it started;
* the same job in one long-lived session (warm): a warm-up job, then ``--warm-runs`` timed
  ones, the fastest timed stage by stage (DuckDB's fastest of as many runs is taken too);
* the same command as a client of a Spark Connect server (``pipeline server up``, started
  once for the run): the first command on the fresh server, then ``--warm-runs`` timed ones;
* DuckDB (a dev dependency, used only here) with as many threads: the same LWW compaction (one
  ``GROUP BY map, key`` with ``arg_max`` over ``(millis, counter, node, op_id)``, snapshot and
  records written as Parquet), without and with the Merkle step done in Python on its output
  (the same kernels the pipeline uses), so the ratio is of equal work;
* a standalone cluster started from the installed pyspark (``pipeline.cluster``) with 1 and 2
  workers of 1 core each, ``compact`` against it, reported per CPU-second of every process
  (master, workers, executors, driver) since on one 2-core machine wall time cannot scale;
* the in-process ``crdt.fold`` (one core): the reference result;
* ``pipeline stream`` while the journal grows by ``--stream-rate`` ops/s: how far the
  compaction lags behind the journal (p50, p99, max).

Every result's Merkle roots are compared with Spark's local result. Then journal appends per
second with group commit in both durability modes, against one commit per append.

    python bench/pipeline.py            # full size
    python bench/pipeline.py --quick    # 200,000 ops, a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.pipeline import cluster
from octosync.pipeline.resume import fold_dataset
from octosync.pipeline.transforms.lww import leaf_sums
from octosync.pipeline.transforms.merkle import merkle_roots, tree_table
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


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants (a driver's JVM, Python workers) are re-parented to this process,
    so reaping them adds their CPU time to ``RUSAGE_CHILDREN`` (Linux)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def children_cpu(settle: float = 0.0) -> float:
    """CPU-seconds of every descendant reaped so far; first waits up to ``settle`` seconds for
    orphans still exiting and reaps them."""
    deadline = time.monotonic() + settle
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def tree_cpu(pids: list[int]) -> float:
    """CPU-seconds of ``pids`` and of their exited, reaped children (executors, Python workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick


class Compact:
    """One ``octosync pipeline compact`` command: job and whole-command seconds, CPU-seconds of
    every process it used, and the Merkle roots it wrote."""

    def __init__(
        self, job: float, whole: float, cpu: float, roots: dict[str, int], session: float = 0.0
    ) -> None:
        self.job, self.whole, self.cpu, self.roots = job, whole, cpu, roots
        self.session = session
        """Seconds from the command's start of Spark (a JVM, or a Connect client's session)
        until its job began."""

    def breakdown(self) -> str:
        """Where the whole command's seconds went (the rest is the interpreter, imports and
        exit)."""
        rest = self.whole - self.session - self.job
        return f"session {self.session:.2f}s + job {self.job:.2f}s + imports and exit {rest:.2f}s"


def spark_compact(
    ops_dir: Path,
    out: Path,
    master: str,
    memory: str,
    conf: tuple[str, ...] = (),
    cluster_pids: list[int] | None = None,
    remote: str | None = None,
) -> Compact:
    """``pipeline compact`` as a whole command: a session of its own on ``master``, or a
    client of the Connect server at ``remote`` (whose JVM is already running)."""
    argv = [sys.executable, "-m", "octosync.cli", "pipeline", "compact"]
    argv += ["--journal", str(ops_dir), "--out", str(out)]
    if remote is not None:
        argv += ["--remote", remote]
    else:
        argv += ["--master", master, "--conf", f"spark.driver.memory={memory}"]
    for setting in conf:
        argv += ["--conf", setting]
    cpu_before = children_cpu() + tree_cpu(cluster_pids or [])
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    whole = time.perf_counter() - started
    # the driver's JVM and Python workers exit after the command: reap them (executors are
    # reaped by their workers, whose counters include them)
    cpu = children_cpu(settle=5.0) + tree_cpu(cluster_pids or []) - cpu_before
    if proc.returncode != 0:
        sys.exit(f"compact failed:\n{proc.stderr[-4000:]}")
    said = re.search(r"in ([0-9.]+)s job, ([0-9.]+)s with Spark start-up", proc.stdout)
    job, with_start = float(said.group(1)), float(said.group(2))  # type: ignore[union-attr]
    roots = json.loads((out / "compaction.json").read_text())["merkle_roots"]
    return Compact(job, whole, cpu, roots, session=with_start - job)


def _mark(marks: list[tuple[float, str]], message: str) -> None:
    marks.append((time.perf_counter(), message))


def spark_compact_warm(
    ops_dir: Path, out: Path, master: str, memory: str, runs: int
) -> tuple[list[float], list[tuple[str, float]]]:
    """Job times of ``runs`` compactions in one long-lived session after a first one that
    warms it (the JIT compiles the hot code over the first jobs), and the stages' seconds of
    the fastest; DuckDB gets the same number of runs and its fastest is taken too."""
    from octosync.pipeline.jobs import compact
    from octosync.pipeline.spark import build_session

    conf = {"spark.driver.memory": memory, "spark.ui.showConsoleProgress": "false"}
    spark = build_session(master, conf, app_name="octosync-bench", verbose=False)
    timed: list[tuple[float, float, list[tuple[float, str]]]] = []
    try:
        compact.run(spark, ops_dir, out)
        for _ in range(runs):
            marks: list[tuple[float, str]] = []
            started = time.perf_counter()
            compact.run(spark, ops_dir, out, progress=partial(_mark, marks))
            timed.append((time.perf_counter() - started, started, marks))
    finally:
        spark.stop()
    total, started, marks = min(timed, key=lambda t: t[0])
    starts = [(t, m[: -len(" ...")]) for t, m in marks if m.endswith(" ...")]
    ends = [t for t, _ in starts[1:]] + [started + total]
    stages = [(name, end - t) for (t, name), end in zip(starts, ends, strict=True)]
    return [t for t, _, _ in timed], stages


def connect_compact(
    ops_dir: Path, tmp: Path, master: str, memory: str, runs: int
) -> tuple[Compact, list[Compact]]:
    """Compactions as whole commands against one Spark Connect server (``pipeline server
    up``): the first, on a server that has run nothing yet, then ``runs`` on the warm one."""
    from octosync.pipeline import connect

    data = tmp / "connect"
    state = connect.up(data, master=master, port=0, driver_memory=memory)
    try:
        first = spark_compact(
            ops_dir, tmp / "compacted-connect", master, memory, remote=state.job_url
        )
        warm = [
            spark_compact(ops_dir, tmp / "compacted-connect", master, memory, remote=state.job_url)
            for _ in range(runs)
        ]
    finally:
        connect.down(data)
    return first, warm


def duckdb_compact(
    ops_dir: Path, out: Path, threads: int, merkle: bool
) -> tuple[float, dict[str, int], int]:
    """DuckDB's LWW compaction of the same files: the winner per ``(map, key)`` by
    ``(millis, counter, node, op_id)`` (the latest delivery of it by ``seq``), snapshot and
    records written as Parquet; with ``merkle``, the tree built from its winners in Python
    with the pipeline's kernels and written too. Returns seconds, roots ({} without Merkle),
    rows."""
    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute(
        "CREATE TEMP TABLE w AS SELECT map, key, arg_max("
        "struct_pack(seq, op, value, millis, counter, node, origin, op_id, recorded_ms), "
        "(millis, counter, node, op_id, seq, recorded_ms)) AS r "
        f"FROM read_parquet('{ops_dir}/*.parquet') WHERE op IN ('PUT', 'REMOVE') "
        "GROUP BY map, key"
    )
    con.execute(
        "COPY (SELECT map, key, CASE WHEN r.op = 'REMOVE' THEN NULL ELSE r.value END AS value, "
        "r.millis AS millis, r.counter AS counter, r.node AS node, "
        "r.op = 'REMOVE' AS tombstone FROM w) "
        f"TO '{out}/snapshot.parquet' (FORMAT parquet)"
    )
    con.execute(
        "COPY (SELECT r.seq AS seq, map, key, r.op AS op, r.value AS value, r.millis AS millis, "
        "r.counter AS counter, r.node AS node, r.origin AS origin, r.op_id AS op_id, "
        f"r.recorded_ms AS recorded_ms FROM w) TO '{out}/records.parquet' (FORMAT parquet)"
    )
    roots: dict[str, int] = {}
    if merkle:
        winners = con.sql(
            "SELECT map, key, r.millis AS millis, r.counter AS counter, r.node AS node FROM w"
        ).to_arrow_table()
        parts = []
        for batch in leaf_sums(winners.to_batches()):
            parts += zip(*(batch.column(c).to_pylist() for c in batch.schema.names), strict=True)
        tree = tree_table(parts)
        pq.write_table(tree, out / "merkle.parquet")
        roots = merkle_roots(tree)
    rows = con.execute("SELECT count(*) FROM w").fetchone()[0]  # type: ignore[index]
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed, roots, int(rows)


def on_cluster(ops_dir: Path, tmp: Path, workers: int, memory: str, master_memory: str) -> Compact:
    """``compact`` against a fresh standalone cluster of ``workers`` 1-core workers."""
    data = tmp / f"cluster-{workers}"
    state = cluster.up(data, workers=workers, cores=1, memory=memory, timeout=180.0)
    try:
        conf = (f"spark.executor.memory={memory}", "spark.ui.showConsoleProgress=false")
        return spark_compact(
            ops_dir,
            tmp / f"compacted-cluster-{workers}",
            state.url,
            master_memory,
            conf,
            [d.pid for d in state.daemons()],
        )
    finally:
        cluster.down(data)


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


def stream_lag(
    tmp: Path, master: str, rate: int, seconds: float, *extra: str
) -> tuple[list[float], int]:
    """``pipeline stream`` on a journal growing by ``rate`` ops/s for ``seconds``: for each
    tenth of a second's appends, the seconds from its commit until ``compaction.json`` covers
    it; and the ops appended. The stream is started and has finished a first batch before the
    timed appends begin (JVM start-up is not lag)."""
    from octosync.pipeline.jobs.stream import read_meta
    from octosync.store.synthetic import generate_records

    data = tmp / f"stream-{time.monotonic_ns()}"
    step = max(1, rate // 10)
    records = generate_records(int(rate * seconds) + step, seed=3)
    with Journal(data) as j:
        j.append(records[:step])
    out = data / "compacted"
    argv = [sys.executable, "-m", "octosync.cli", "pipeline", "stream", "--journal", str(data)]
    proc = subprocess.Popen(
        [*argv, "--master", master, "--interval", "0.5", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def covered() -> int:
        try:
            return int(read_meta(out).get("as_of_seq", 0))
        except (OSError, ValueError):
            return 0  # between the two renames of a swap

    try:
        deadline = time.monotonic() + 300
        while covered() < step and time.monotonic() < deadline:
            time.sleep(0.1)
        # A watcher polls the compaction while the appends go on: each time it moves, the
        # moment is kept with the seq it reached (polling only after the appends would count
        # the rest of the run as lag).
        seen: list[tuple[int, float]] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                upto = covered()
                if not seen or upto > seen[-1][0]:
                    seen.append((upto, time.monotonic()))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        commits: list[tuple[int, float]] = []
        with GroupCommitWriter(data, durability="normal") as writer:
            started = time.monotonic()
            for i, lo in enumerate(range(step, len(records) - step + 1, step)):
                time.sleep(max(0.0, started + i * 0.1 - time.monotonic()))
                seqs = writer.append(records[lo : lo + step])
                commits.append((seqs[-1], time.monotonic()))
        deadline = time.monotonic() + 300
        while (not seen or seen[-1][0] < commits[-1][0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        done.set()
        watcher.join()
        if not seen or seen[-1][0] < commits[-1][0]:
            sys.exit("the stream did not catch up within 300 s")
        lags = []
        for seq, at in commits:  # the first moment the compaction covered it
            lags.append(max(0.0, next(t for upto, t in seen if upto >= seq) - at))
        return lags, sum(step for _ in commits)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def compiled_package() -> None:
    """Byte-compile octosync where it is imported from, as ``pip install`` does: in an editable
    checkout run with ``PYTHONDONTWRITEBYTECODE`` every command would compile its modules
    again (about 0.1 s of a Connect command's client)."""
    import compileall

    import octosync

    compileall.compile_dir(Path(octosync.__file__).parent, quiet=1)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="200,000 ops, 20,000 keys")
    ap.add_argument("--ops", type=int, default=10_000_000, help="ops to generate")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys (Zipf)")
    ap.add_argument("--origins", type=int, default=5, help="writing nodes")
    ap.add_argument("--files", type=int, default=8, help="Parquet files")
    ap.add_argument("--master", default="local[2]", help="Spark master of the local runs")
    ap.add_argument("--driver-memory", default="4g", help="Spark driver memory")
    ap.add_argument("--worker-memory", default="2g", help="memory of each cluster worker")
    ap.add_argument("--duckdb-threads", type=int, default=2, help="DuckDB threads (2)")
    ap.add_argument(
        "--warm-runs",
        type=int,
        default=3,
        help="timed runs of each engine (the fastest counts; Spark's after one warm-up job)",
    )
    ap.add_argument("--appends", type=int, default=20_000, help="journal appends to time")
    ap.add_argument("--threads", type=int, default=16, help="threads appending")
    ap.add_argument("--skip-fold", action="store_true", help="do not run the in-process fold")
    ap.add_argument(
        "--stream-rate", type=int, default=20_000, help="ops/s appended while streaming (20,000)"
    )
    ap.add_argument(
        "--stream-seconds",
        type=float,
        default=20.0,
        help="seconds of appends while `pipeline stream` runs (20; 0 skips it)",
    )
    ap.add_argument("--skip-cluster", action="store_true", help="do not start a cluster")
    ap.add_argument("--ops-dir", default=None, help="reuse this generated dataset")
    args = ap.parse_args()
    if args.quick:
        args.ops, args.keys, args.appends = 200_000, 20_000, 4_000

    become_subreaper()
    compiled_package()
    tmp = Path(tempfile.mkdtemp(prefix="octosync-bench-"))
    try:
        if args.ops_dir:
            ops_dir = Path(args.ops_dir)
            args.ops = sum(pq.ParquetFile(p).metadata.num_rows for p in ops_dir.glob("*.parquet"))
            print(f"reusing {args.ops:,} ops in {ops_dir}")
        else:
            ops_dir = tmp / "ops"
            gen = generate(ops_dir, args.ops, args.keys, args.origins, args.files)
            size = sum(p.stat().st_size for p in ops_dir.iterdir()) / 2**20
            print(
                f"generated {args.ops:,} ops ({args.keys:,} keys, {args.origins} origins, "
                f"10% deletes) as {args.files} Parquet files, {size:.0f} MiB, in {gen:.1f}s"
            )
        n = args.ops

        def check(name: str, roots: dict[str, int]) -> None:
            if roots != cold.roots:
                sys.exit(f"MISMATCH {name}={roots} spark={cold.roots}")

        cold = spark_compact(ops_dir, tmp / "compacted", args.master, args.driver_memory)
        print(
            f"spark compact ({args.master}), whole command: {cold.whole:.1f}s = "
            f"{n / cold.whole:,.0f} ops/s (job {cold.job:.1f}s = {n / cold.job:,.0f} ops/s); "
            f"{cold.cpu:.1f} CPU-s = {n / cold.cpu:,.0f} ops per CPU-second; {load()}"
        )
        warm_runs, stages = spark_compact_warm(
            ops_dir, tmp / "compacted-warm", args.master, args.driver_memory, args.warm_runs
        )
        warm = min(warm_runs)
        print(
            f"spark compact ({args.master}), warm session: job {warm:.1f}s = "
            f"{n / warm:,.0f} ops/s (fastest of {len(warm_runs)} after a warm-up job: "
            f"{', '.join(f'{t:.1f}' for t in warm_runs)} s); {load()}"
        )
        for name, seconds in stages:
            print(f"  stage {name}: {seconds:.1f}s ({seconds / warm:.0%})")

        first, connected = connect_compact(
            ops_dir, tmp, args.master, args.driver_memory, args.warm_runs
        )
        served = min(connected, key=lambda c: c.whole)
        for run in (first, *connected):
            check("connect", run.roots)
        print(
            f"spark compact through a Connect server ({args.master}), whole command: fastest "
            f"{served.whole:.1f}s = {n / served.whole:,.0f} ops/s (job {served.job:.1f}s) of "
            f"{len(connected)} on the warm server ({', '.join(f'{c.whole:.1f}' for c in connected)}"
            f" s); first on a fresh server {first.whole:.1f}s; {load()}"
        )
        print(f"  fastest Connect command: {served.breakdown()}")
        print(
            f"ratio: connect whole command / warm local job = {served.whole / warm:.1f}x "
            f"(target <= 1.5x); connect job / warm local job = {served.job / warm:.1f}x; "
            f"cold command / connect whole command = {cold.whole / served.whole:.1f}x"
        )

        duck: dict[bool, float] = {}
        for merkle in (False, True):
            best = float("inf")
            for _ in range(args.warm_runs):
                took, roots, rows = duckdb_compact(
                    ops_dir, tmp / "duckdb", args.duckdb_threads, merkle
                )
                best = min(best, took)
            duck[merkle] = best
            what = "with the Merkle step in Python" if merkle else "LWW winners only"
            print(
                f"duckdb ({args.duckdb_threads} threads), {what}: {best:.1f}s = "
                f"{n / best:,.0f} ops/s, {rows:,} rows; {load()}"
            )
            if merkle:
                check("duckdb", roots)
        print(
            f"ratio: spark warm job / duckdb with Merkle (equal work) = {warm / duck[True]:.1f}x "
            f"(target <= 3x); / duckdb winners only = {warm / duck[False]:.1f}x; "
            f"spark whole command / duckdb with Merkle = {cold.whole / duck[True]:.1f}x; "
            f"connect whole command / duckdb with Merkle = {served.whole / duck[True]:.1f}x"
        )

        if not args.skip_cluster:
            for workers in (1, 2):
                run = on_cluster(ops_dir, tmp, workers, args.worker_memory, args.driver_memory)
                check(f"cluster-{workers}", run.roots)
                print(
                    f"standalone cluster, {workers} worker(s) x 1 core: whole command "
                    f"{run.whole:.1f}s (job {run.job:.1f}s = {n / run.job:,.0f} ops/s); "
                    f"{run.cpu:.1f} CPU-s = {n / run.cpu:,.0f} ops per CPU-second "
                    f"(local[2] whole command: {n / cold.cpu:,.0f}); {load()}"
                )

        if not args.skip_fold:
            fold_s, fold_roots, rows = in_process_fold(ops_dir)
            check("in-process fold", fold_roots)
            print(
                f"in-process fold (one core): {fold_s:.1f}s = {n / fold_s:,.0f} ops/s, "
                f"{rows:,} rows; spark warm job is {fold_s / warm:.1f}x faster, whole command "
                f"{fold_s / cold.whole:.1f}x; {load()}"
            )
        print("merkle roots identical across every run: True")

        if args.stream_seconds > 0:
            lags, n_streamed = stream_lag(tmp, args.master, args.stream_rate, args.stream_seconds)
            lags.sort()
            p50, p99 = lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))]
            print(
                f"pipeline stream ({args.master}, 0.5 s trigger), journal growing by "
                f"{args.stream_rate:,} ops/s for {args.stream_seconds:g} s ({n_streamed:,} ops): "
                f"compaction lags the journal by p50 {p50:.1f}s, p99 {p99:.1f}s, "
                f"max {lags[-1]:.1f}s (target p99 <= 5 s); {load()}"
            )

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
