"""The jobs on a real Spark standalone cluster (a master and two workers on loopback, started
from the installed pyspark by ``octosync pipeline cluster up``), against local mode.

The cluster is started once for the module and always stopped by the fixture's finalizer. Its
jobs run as ``octosync pipeline ... --master spark://...`` subprocesses (the test session's own
local SparkSession cannot be pointed at another master); local mode runs in the shared local
session. Small inputs and 512 MiB per worker keep it short: four jobs on the cluster, each
paying a driver JVM start and its executors' start (about two minutes on a quiet 2-core machine,
several on a loaded one).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from octosync.cli import main
from octosync.errors import PipelineError
from octosync.pipeline import cluster
from octosync.pipeline.jobs import compact, report, verify
from octosync.pipeline.resume import fold_dataset
from octosync.store.journal import Journal
from octosync.store.synthetic import generate_lww_table, generate_records
from tests.pipeline.helpers import (
    LOOPBACK,
    assert_same_compaction,
    frame,
    listen_addresses,
)

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

WORKER_MEMORY = "512m"
JOB_TIMEOUT = 240.0
CLI = (sys.executable, "-m", "octosync.cli", "pipeline")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mixed ops (LWW, OR-Map, counters) and frames of three streams, one with a gap."""
    data = tmp_path_factory.mktemp("journal")
    records = generate_records(4000, seed=11)
    frames = [frame("a", 0, 0, True)] + [frame("a", e - 1, e, False) for e in range(1, 40)]
    frames += [frame("b", 0, 0, True), frame("b", 0, 1, False), frame("b", 3, 4, False)]
    frames += [frame("c", 5, 5, True)]
    with Journal(data) as j:
        for i in range(0, len(records), 1000):
            j.append(records[i : i + 1000])
        j.append(frames)
    return data


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    data = tmp_path_factory.mktemp("cluster")
    state = cluster.up(data, workers=2, memory=WORKER_MEMORY, timeout=120.0)
    try:
        yield state
    finally:
        if cluster.read_state(data) is not None:
            cluster.down(data, grace=10.0)
        assert not any(cluster.is_spark_daemon(d.pid) for d in state.daemons())


def run_on(state: cluster.ClusterState, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "octosync.cli", "pipeline", *argv, *cluster_args(state)],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )


def cluster_args(state: cluster.ClusterState) -> list[str]:
    return [
        "--master",
        state.url,
        "--conf",
        f"spark.executor.memory={WORKER_MEMORY}",
        "--conf",
        "spark.driver.memory=512m",
    ]


def test_the_cluster_is_up_on_loopback_with_two_workers(
    spark_cluster: cluster.ClusterState,
) -> None:
    view = cluster.master_json(spark_cluster)
    assert view is not None
    assert view["url"] == spark_cluster.url
    alive = [w for w in view["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2
    assert {w["host"] for w in alive} == {"127.0.0.1"}
    for d in spark_cluster.daemons():
        for port in (d.port, d.webui_port):
            assert listen_addresses(port) <= LOOPBACK, (d.role, port)
            assert listen_addresses(port), (d.role, port)


def test_compact_on_the_cluster_equals_local_mode_and_the_fold(
    spark: Any, spark_cluster: cluster.ClusterState, journal: Path, tmp_path: Path
) -> None:
    on_cluster = tmp_path / "cluster"
    done = run_on(spark_cluster, "compact", "--journal", str(journal), "--out", str(on_cluster))
    assert done.returncode == 0, done.stderr
    local = compact.run(spark, journal, tmp_path / "local")

    assert_same_compaction(on_cluster, local, journal, done.stdout)


def test_verify_on_the_cluster_equals_local_mode(
    spark: Any, spark_cluster: cluster.ClusterState, journal: Path
) -> None:
    done = run_on(spark_cluster, "verify", "--journal", str(journal), "--json")
    assert done.returncode == 1, done.stderr  # stream b has a gap
    local = verify.run(spark, journal)
    reported = json.loads(done.stdout)
    assert [p["problem"] for p in reported["problems"]] == ["gap"]
    assert reported["problems"] == [
        {
            "stream": p.stream,
            "epoch": p.epoch,
            "seq": p.seq,
            "problem": p.problem,
            "detail": p.detail,
        }
        for p in local.problems
    ]
    assert [s["frames"] for s in reported["streams"]] == [s.frames for s in local.streams]
    assert [s["stream"] for s in reported["streams"]] == ["a", "b", "c"]


def test_report_on_the_cluster_equals_local_mode(
    spark: Any, spark_cluster: cluster.ClusterState, journal: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cluster"
    done = run_on(spark_cluster, "report", "--journal", str(journal), "--out", str(out))
    assert done.returncode == 0, done.stderr
    local = report.run(spark, journal, tmp_path / "local")
    assert f"{local.ops} TopGun ops, {local.conflicts} concurrent writes" in done.stdout
    tables = sorted(p.name for p in (tmp_path / "local").glob("*.csv"))
    assert {"hottest_keys.csv", "conflicts_per_key.csv"} <= set(tables)
    assert sorted(p.name for p in out.glob("*.csv")) == tables
    for name in tables:
        with (out / name).open() as a, (tmp_path / "local" / name).open() as b:
            assert list(csv.reader(a)) == list(csv.reader(b)), name
    for chart in local.charts:
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="{chart}"' in (out / "index.html").read_text()


def test_cli_mistakes_are_one_line_and_a_nonzero_exit(
    spark_cluster: cluster.ClusterState,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = str(Path(spark_cluster.master.log).parent.parent)

    def mistake(*argv: str) -> str:
        capsys.readouterr()
        assert main(["pipeline", "cluster", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("octosync pipeline cluster ")
        assert "\n" not in err
        return err

    assert "already up at " + spark_cluster.url in mistake("up", "--data", data)
    assert "no cluster is up here" in mistake("down", "--data", str(tmp_path))
    assert "no cluster is up here" in mistake("status", "--data", str(tmp_path))
    port = str(spark_cluster.master.port)
    assert f"--port: port {port} on 127.0.0.1 is in use" in mistake(
        "up", "--data", str(tmp_path), "--port", port
    )
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-java-here"))
    assert "no java is on PATH" in mistake("up", "--data", str(tmp_path))
    assert not (tmp_path / "spark-cluster" / "state.json").exists()

    capsys.readouterr()
    assert main(["pipeline", "cluster", "status", "--data", data]) == 0
    listed = capsys.readouterr().out
    assert listed.count(": running, master says ALIVE") == 2


def test_compact_through_a_connect_server_on_the_cluster_equals_local_mode(
    spark: Any,
    spark_cluster: cluster.ClusterState,
    journal: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``pipeline server up --master cluster`` finds the cluster started under the same data
    directory; a compaction through that server runs its tasks on the cluster's executors and
    writes what local mode writes."""
    from octosync.pipeline import connect

    data = Path(spark_cluster.master.log).parent.parent
    argv = ["pipeline", "server", "up", "--data", str(data), "--master", "cluster"]
    assert main([*argv, "--port", "0", "--driver-memory", "1g"]) == 0
    state = connect.read_state(data)
    assert state is not None
    try:
        assert state.master == spark_cluster.url
        assert f"(master {spark_cluster.url})" in capsys.readouterr().out
        out = tmp_path / "through-connect"
        done = subprocess.run(
            [*CLI, "compact", "--journal", str(journal), "--out", str(out), "--remote", state.url],
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        view = cluster.master_json(spark_cluster)
        assert view is not None
        apps = view["activeapps"]
        assert len(apps) == 1, apps  # the Connect server is the cluster's one application
        executors = Path(spark_cluster.master.log).parent.glob("worker-*/*/*/stderr")
        assert apps[0]["id"] in {p.parent.parent.name for p in executors}
    finally:
        connect.down(data, grace=10.0)
    local = compact.run(spark, journal, tmp_path / "local")
    assert_same_compaction(out, local, journal, done.stdout)


def test_server_up_on_a_cluster_that_is_not_up_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["pipeline", "server", "up", "--data", str(tmp_path), "--master", "cluster"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("octosync pipeline server up: ")
    assert "no cluster is up under" in err
    assert "\n" not in err
    assert connect_state_absent(tmp_path)


def connect_state_absent(data: Path) -> bool:
    from octosync.pipeline import connect

    return connect.read_state(data) is None


def write_ops(out: Path, n_ops: int, n_keys: int) -> None:
    table = generate_lww_table(n_ops, n_keys=n_keys, seed=5)
    n = table.num_rows
    table = table.add_column(0, "seq", pa.array(np.arange(1, n + 1, dtype=np.int64)))
    table = table.append_column("recorded_ms", pa.array(np.zeros(n, dtype=np.int64)))
    out.mkdir(parents=True)
    for i in range(4):
        pq.write_table(table.slice(i * (n // 4), n // 4 if i < 3 else None), out / f"{i}.parquet")


def test_a_worker_killed_mid_job_means_a_retry_or_one_clear_error(
    spark_cluster: cluster.ClusterState, tmp_path: Path
) -> None:
    """Last in the module: it leaves the cluster with one worker."""
    ops = tmp_path / "ops"
    write_ops(ops, 150_000, 40_000)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "octosync.cli",
            "pipeline",
            "compact",
            "--journal",
            str(ops),
            "--out",
            str(out),
            *cluster_args(spark_cluster),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim = spark_cluster.workers[0]
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first stage has run on the executors: kill one now
            lines.append(line)
            if " ops on " in line:
                os.kill(victim.pid, signal.SIGKILL)
                break
        stdout, rest = proc.communicate(timeout=JOB_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(lines) + rest
    assert any(" ops on " in line for line in lines), stderr
    deadline = time.monotonic() + 10
    while cluster.is_spark_daemon(victim.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not cluster.is_spark_daemon(victim.pid)

    if proc.returncode == 0:  # Spark retried the lost tasks on the other worker
        expected = fold_dataset(ops)
        meta = json.loads((out / "compaction.json").read_text())
        assert meta["merkle_roots"] == {m: expected.merkle_root(m) for m in expected.maps()}
        snapshot = pq.read_table(out / "snapshot")
        assert snapshot.num_rows == len(expected.snapshot_rows())
        assert sorted(snapshot.column("key").to_pylist()) == sorted(
            r.key for r in expected.snapshot_rows()
        )
        print(f"worker {victim.pid} killed mid-job; Spark retried: {stdout.splitlines()[0]}")
    else:
        assert proc.returncode == 2, stderr
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("octosync pipeline compact: "), stderr
        assert "Traceback" not in stderr
        assert not out.exists()  # nothing half-written where the result goes
        print(f"worker {victim.pid} killed mid-job; one clear error: {last}")


def test_up_waits_bounded_and_stops_what_it_started(tmp_path: Path) -> None:
    """Workers that have not registered within the timeout: every process started is stopped,
    and no state is left behind."""
    said: list[str] = []
    with pytest.raises(PipelineError) as info:
        cluster.up(tmp_path, workers=1, memory=WORKER_MEMORY, timeout=0.01, progress=said.append)
    assert "0 of 1 workers registered" in str(info.value)
    assert cluster.read_state(tmp_path) is None
    pids = [int(line.split()[2]) for line in said if " pid " in line]
    assert len(pids) == 2
    assert not any(cluster.is_spark_daemon(pid) for pid in pids)
