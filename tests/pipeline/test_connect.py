"""The jobs as clients of a real Spark Connect server (``octosync pipeline server up``: the
server from the installed pyspark, on loopback), against the shared local session.

The server is started once for the module (``local[1]``, 1 GiB: it shares two cores with the
test session's JVM) and always stopped by the fixture's finalizer; its data directory holds the
journal, so the jobs find the server the way a user's do: by ``--journal``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from octosync.cli import main
from octosync.pipeline import connect
from octosync.pipeline.jobs import compact, report, verify
from octosync.store.journal import Journal
from octosync.store.synthetic import generate_records
from tests.pipeline.helpers import (
    LOOPBACK,
    assert_same_compaction,
    frame,
    listen_addresses,
)

pytestmark = pytest.mark.spark

JOB_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, connect.ServerState]]:
    """A data dir with a journal (mixed ops, frames of two streams, one with a gap) and a
    Connect server started under it."""
    data = tmp_path_factory.mktemp("served")
    with Journal(data) as j:
        records = generate_records(2000, seed=13)
        j.append(records[:1000])
        j.append([frame("a", 0, 0, True), *(frame("a", e - 1, e, False) for e in range(1, 20))])
        j.append(records[1000:])
        j.append([frame("b", 0, 0, True), frame("b", 2, 3, False)])
    state = connect.up(data, master="local[1]", port=0, driver_memory="1g", timeout=180.0)
    try:
        yield data, state
    finally:
        if connect.read_state(data) is not None:
            connect.down(data, grace=10.0)
        assert connect.server_pids(state.pid) == []


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``octosync pipeline ...`` in a process of its own: a Connect client and this process's
    classic session cannot share one interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "octosync.cli", "pipeline", *argv],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )


def executions(state: connect.ServerState) -> int:
    """Plans the server has run so far, counted in its log."""
    return Path(state.log).read_text(errors="replace").count("ExecuteHolder")


def test_the_server_listens_on_loopback_only(served: tuple[Path, connect.ServerState]) -> None:
    data, state = served
    assert connect.running_url(data) == state.url == f"sc://127.0.0.1:{state.port}"
    assert connect.answers(state.port)
    assert listen_addresses(state.port)
    assert listen_addresses(state.port) <= LOOPBACK


def test_compact_through_the_server_equals_local_mode_and_the_fold(
    spark: Any, served: tuple[Path, connect.ServerState], tmp_path: Path
) -> None:
    data, state = served
    before = executions(state)
    log_size = len(Path(state.log).read_text(errors="replace"))
    remote = tmp_path / "remote"
    done = run_cli("compact", "--journal", str(data), "--out", str(remote))
    assert done.returncode == 0, done.stderr
    assert executions(state) > before  # the job ran on the server, not in this process
    again = run_cli("compact", "--journal", str(data), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    log = Path(state.log).read_text(errors="replace")[log_size:]
    used = set(re.findall(r"sessionId: ([0-9a-f-]+) accessed", log))
    assert used == {state.session}  # both jobs ran in the server's shared session
    local = compact.run(spark, data, tmp_path / "local")

    assert_same_compaction(remote, local, data, done.stdout)


def test_verify_and_report_through_the_server_equal_local_mode(
    spark: Any, served: tuple[Path, connect.ServerState], tmp_path: Path
) -> None:
    data, state = served
    done = run_cli("verify", "--journal", str(data), "--json", "--remote", state.url)
    assert done.returncode == 1, done.stderr  # stream b has a gap
    reported = json.loads(done.stdout)
    local = verify.run(spark, data)
    assert [p["problem"] for p in reported["problems"]] == ["gap"]
    assert [(p["stream"], p["epoch"], p["seq"]) for p in reported["problems"]] == [
        (p.stream, p.epoch, p.seq) for p in local.problems
    ]
    assert [(s["stream"], s["frames"]) for s in reported["streams"]] == [("a", 20), ("b", 2)]

    out = tmp_path / "remote"
    done = run_cli("report", "--journal", str(data), "--out", str(out))
    assert done.returncode == 0, done.stderr
    mine = report.run(spark, data, tmp_path / "local")
    assert f"{mine.ops} TopGun ops, {mine.conflicts} concurrent writes" in done.stdout
    tables = sorted(p.name for p in (tmp_path / "local").glob("*.csv"))
    assert "streams.csv" in tables
    assert sorted(p.name for p in out.glob("*.csv")) == tables
    for name in tables:
        with (out / name).open() as a, (tmp_path / "local" / name).open() as b:
            assert list(csv.reader(a)) == list(csv.reader(b)), name


def test_remote_local_and_master_keep_a_job_off_the_server(
    served: tuple[Path, connect.ServerState], tmp_path: Path
) -> None:
    from octosync.cli import build_parser

    data, state = served
    parse = build_parser().parse_args
    base = ["pipeline", "verify", "--journal", str(data)]
    from octosync.pipeline.cli import remote_url

    assert remote_url(parse(base)) == state.job_url == f"{state.url}/;session_id={state.session}"
    assert remote_url(parse([*base, "--conf", "spark.sql.shuffle.partitions=3"])) == state.url
    streaming = ["pipeline", "stream", "--journal", str(data)]
    assert remote_url(parse(streaming)) == state.url  # a query of its own, in a session of its own
    assert remote_url(parse([*base, "--remote", "local"])) is None
    assert remote_url(parse([*base, "--master", "local[1]"])) is None
    assert remote_url(parse([*base, "--remote", "sc://127.0.0.1:1"])) == "sc://127.0.0.1:1"
    elsewhere = ["pipeline", "verify", "--journal", str(tmp_path)]
    assert remote_url(parse(elsewhere)) is None


def test_failures_are_one_line_and_a_nonzero_exit(
    served: tuple[Path, connect.ServerState], tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    data, state = served

    def mistake(*argv: str) -> str:
        capsys.readouterr()
        assert main(["pipeline", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("octosync pipeline ")
        assert "\n" not in err
        return err

    assert f"already up at {state.url}" in mistake("server", "up", "--data", str(data))
    assert "no Spark Connect server is up here" in mistake(
        "server", "down", "--data", str(tmp_path)
    )
    assert f"port {state.port} on 127.0.0.1 is in use" in mistake(
        "server", "up", "--data", str(tmp_path), "--port", str(state.port)
    )
    refused = mistake(
        "verify", "--journal", str(data), "--remote", "sc://127.0.0.1:1", "--master-timeout", "0"
    )
    assert "--remote: no Spark Connect server answers at sc://127.0.0.1:1" in refused
    assert "expected an sc://HOST:PORT URL" in mistake(
        "verify", "--journal", str(data), "--remote", "http://x"
    )
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-java-here"))
    assert "no java is on PATH" in mistake("server", "up", "--data", str(tmp_path), "--port", "0")
    assert not (tmp_path / "spark-connect" / "state.json").exists()


def test_a_server_that_cannot_start_is_one_line_quoting_its_log(
    tmp_path: Path, capsys: Any
) -> None:
    capsys.readouterr()
    argv = ["pipeline", "server", "up", "--data", str(tmp_path), "--port", "0"]
    assert main([*argv, "--driver-memory", "not-a-size", "--timeout", "60"]) == 2
    started, err = capsys.readouterr().err.strip().splitlines()  # its pid, then the failure
    assert started.startswith("spark connect server pid ")
    assert err.startswith("octosync pipeline server up: the Connect server exited while starting")
    assert not (tmp_path / "spark-connect" / "state.json").exists()
    assert (tmp_path / "spark-connect" / "server.log").stat().st_size > 0


def test_status_after_a_kill_then_up_again(tmp_path: Path, capsys: Any) -> None:
    """Last: it starts a second server (the module's is stopped by its fixture)."""
    state = connect.up(tmp_path, master="local[1]", port=0, driver_memory="512m", timeout=180.0)
    try:
        capsys.readouterr()
        assert main(["pipeline", "server", "status", "--data", str(tmp_path)]) == 0
        assert "running, answering on 127.0.0.1:" in capsys.readouterr().out
        for pid in connect.server_pids(state.pid):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while connect.server_pids(state.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert main(["pipeline", "server", "status", "--data", str(tmp_path)]) == 1
        assert f"pid {state.pid}: gone" in capsys.readouterr().out
        assert connect.running_url(tmp_path) is None
        state = connect.up(tmp_path, master="local[1]", port=0, driver_memory="512m")
        assert connect.running_url(tmp_path) == state.url
    finally:
        assert connect.down(tmp_path, grace=10.0).endswith(("stopped", "killed after 10s"))
    assert connect.server_pids(state.pid) == []
