"""A long-lived Spark Connect server on this machine, started from the installed ``pyspark``.

Every ``octosync pipeline`` command used to start its own JVM, and JVM start-up plus first-run
compilation cost most of a small job. The wheel ships ``sbin/start-connect-server.sh`` and the
Connect server's jar, so ``up`` starts one server (``--wait``: in the foreground of its own
process group, so the pid we hold is the server's), bound to 127.0.0.1 only, and every later
command talks to it over gRPC as a thin client (``SparkSession.builder.remote``). What was
started is written to ``DATA/spark-connect/state.json``; the server logs to ``server.log``
beside it.

The server runs the jobs' Python code (user-defined functions, the journal data source) in
Python workers it starts with the interpreter and environment ``up`` ran with: a server
started before an upgrade of octosync keeps the old code until it is restarted.

A pid from the state file is signalled only while ``/proc`` shows a process of that group that
is still the Connect server, so a stale file never kills an unrelated process that reused it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from octosync.errors import PipelineError
from octosync.pipeline.cluster import (
    HOST,
    _last_line,
    check_port_free,
    free_port,
    is_spark_daemon,
    java_path,
    spark_home,
)
from octosync.pipeline.cluster import read_state as read_cluster_state
from octosync.pipeline.layout import CONNECT_SUBDIR
from octosync.pipeline.spark import DEFAULT_MASTER, session_conf

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "state.json"
LOG_FILE = "server.log"
DEFAULT_PORT = 15002
"""Spark Connect's own default port; ``--port 0`` picks a free one."""


class ServerState(msgspec.Struct, frozen=True):
    """``pid`` leads the server's process group (``start-connect-server.sh`` and its JVM)."""

    pid: int
    port: int
    master: str
    log: str
    python: str
    session: str = ""
    """The id of the server-side session the batch jobs share (a UUID)."""

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def job_url(self) -> str:
        """``url`` naming the shared session: a job run there finds it warm."""
        return f"{self.url}/;session_id={self.session}" if self.session else self.url


def state_dir(data: Path) -> Path:
    return Path(data) / CONNECT_SUBDIR


def read_state(data: Path) -> ServerState | None:
    path = state_dir(data) / STATE_FILE
    if not path.exists():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=ServerState)
    except msgspec.DecodeError as exc:
        raise PipelineError(f"unreadable Connect server state: {exc}", path=str(path)) from None


def _proc_group(pid: int) -> int | None:
    """The process group of ``pid``, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if fields[0] == "Z":
        return None
    return int(fields[2])


def _is_server(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SERVER_CLASS.encode() in cmdline


def server_pids(group: int) -> list[int]:
    """Live processes of process group ``group`` that run the Connect server (the launcher
    script and the JVM both name its class on their command line)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(group, os.WNOHANG)  # reap it if it is our child and has exited
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if _proc_group(pid) == group and _is_server(pid):
            found.append(pid)
    return sorted(found)


def answers(port: int, timeout: float = 1.0) -> bool:
    """Something accepts TCP connections on ``HOST:port``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def running_url(data: Path, *, shared: bool = False) -> str | None:
    """The ``sc://`` URL of the server ``up`` started under ``data``, when it is running;
    with ``shared``, the URL of its shared session (:attr:`ServerState.job_url`)."""
    try:
        state = read_state(data)
    except PipelineError:
        return None
    if state is None or not server_pids(state.pid):
        return None
    return state.job_url if shared else state.url


def server_conf(master: str, port: int, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's Spark settings: the jobs' own (``spark.session_conf``), gRPC on loopback."""
    settings = session_conf(master, verbose=True)
    settings |= {
        "spark.ui.showConsoleProgress": "false",
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",  # the port we recorded, or a failure
        # The batch jobs share one session (``ServerState.session``): its first plan costs
        # about a second more than the next ones (measured in ``bench/pipeline.py``). A
        # session idle for an hour is closed as usual; keeping no tombstones of closed
        # sessions lets the next job open the shared one again under the same id.
        "spark.connect.session.manager.closedSessionsTombstonesSize": "0",
    }
    return settings | dict(conf or {})


CLUSTER_MASTER = "cluster"
"""``--master cluster``: the standalone cluster ``pipeline cluster up`` started under the same
data directory."""


def cluster_master(data: Path, master: str, conf: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The master URL and settings for ``master``: ``cluster`` names the standalone cluster
    started under ``data`` (its URL, and executors as large as its workers offer unless
    ``conf`` says otherwise); any other master is passed through."""
    if master != CLUSTER_MASTER:
        return master, dict(conf)
    state = read_cluster_state(data)
    if state is None or not any(is_spark_daemon(d.pid) for d in state.daemons()):
        raise PipelineError(
            f"--master cluster: no cluster is up under {data}; start one with "
            "`octosync pipeline cluster up` (or give its spark:// URL)",
            path="--master",
        )
    return state.url, {"spark.executor.memory": state.memory} | dict(conf)


def up(
    data: Path,
    *,
    master: str = DEFAULT_MASTER,
    port: int | None = DEFAULT_PORT,
    conf: Mapping[str, str] | None = None,
    driver_memory: str = "2g",
    timeout: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> ServerState:
    """Start the server; return once it accepts connections on its port. ``master`` is where
    it runs its jobs: ``local[N]``, a standalone cluster's ``spark://`` URL, or ``cluster``
    (:func:`cluster_master`).

    Past ``timeout`` seconds (or when the server exits early) it is stopped and a
    ``PipelineError`` quotes the last line of its log.
    """
    say = progress or (lambda _: None)
    data = Path(data).resolve()
    existing = read_state(data)
    if existing is not None:
        if server_pids(existing.pid):
            raise PipelineError(
                f"a Spark Connect server is already up at {existing.url} (pid {existing.pid}); "
                "run `octosync pipeline server down` first"
            )
        (state_dir(data) / STATE_FILE).unlink()  # stale: the server is gone
    java_path()
    master, conf = cluster_master(data, master, conf or {})
    port = port or free_port()
    check_port_free(port, "--port")
    home = spark_home()
    root = state_dir(data)
    root.mkdir(parents=True, exist_ok=True)
    log = root / LOG_FILE
    env = dict(os.environ)
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(root),
        "SPARK_PID_DIR": str(root),
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,  # the workers import octosync from this environment
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    argv = [str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", master]
    argv += ["--driver-memory", driver_memory]
    for key, value in server_conf(master, port, conf).items():
        argv += ["--conf", f"{key}={value}"]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,  # its own group: `down` signals the group, not us
        )
    state = ServerState(proc.pid, port, master, str(log), sys.executable, str(uuid.uuid4()))
    say(f"spark connect server pid {proc.pid} on {HOST}:{port} (log {log})")
    try:
        (root / STATE_FILE).write_bytes(msgspec.json.encode(state))
        _wait_until_answering(state, proc, timeout)
    except BaseException:
        _stop_group(state.pid, grace=5.0)
        with contextlib.suppress(FileNotFoundError):
            (root / STATE_FILE).unlink()
        raise
    return state


def _wait_until_answering(
    state: ServerState, proc: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PipelineError(
                f"the Connect server exited while starting: {_last_line(state.log)}"
            )
        if answers(state.port, timeout=0.5):
            return
        time.sleep(0.3)
    raise PipelineError(
        f"the Connect server did not answer on {HOST}:{state.port} within {timeout:g}s: "
        f"{_last_line(state.log)}"
    )


def _stop_group(group: int, grace: float) -> str:
    """SIGTERM to the server's processes, SIGKILL to those alive after ``grace`` seconds."""
    pids = server_pids(group)
    if not pids:
        return f"server pid {group}: already gone"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while server_pids(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = server_pids(group)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 5.0
    while server_pids(group) and time.monotonic() < kill_deadline:
        time.sleep(0.1)
    if left:
        return f"server pid {group}: killed after {grace:g}s"
    return f"server pid {group}: stopped"


def down(data: Path, *, grace: float = 15.0) -> str:
    """Stop the server recorded under ``data``; one line saying what happened."""
    state = read_state(data)
    if state is None:
        raise PipelineError(
            f"no Spark Connect server is up here (no {state_dir(data) / STATE_FILE})"
        )
    said = _stop_group(state.pid, grace)
    (state_dir(data) / STATE_FILE).unlink()
    return said


def status(data: Path) -> tuple[ServerState, str]:
    """The recorded server and one line: running and answering, running, or gone."""
    state = read_state(data)
    if state is None:
        raise PipelineError(
            f"no Spark Connect server is up here (no {state_dir(data) / STATE_FILE})"
        )
    if not server_pids(state.pid):
        return state, f"pid {state.pid}: gone (last log line: {_last_line(state.log)})"
    port = "answering" if answers(state.port) else "not answering"
    return state, f"pid {state.pid}: running, {port} on {HOST}:{state.port}, master {state.master}"


REMOTE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
"""Settings a Connect client gives its session (runtime SQL settings only: the rest is the
server's, fixed at ``up``)."""


CLIENT_RETRIES: dict[str, Any] = {"max_retries": 6, "max_backoff": 2_000}
"""A lost server fails the job within about seven seconds (Connect's default retries for
ten minutes, and again at the client's exit)."""


def remote_session(
    url: str, conf: Mapping[str, str] | None = None, *, timeout: float = 30.0
) -> Any:
    """A Spark Connect session on ``url`` (``sc://host:port``); one ``PipelineError`` line when
    nobody answers there."""
    if not url.startswith("sc://"):
        raise PipelineError(f"expected an sc://HOST:PORT URL, got {url!r}", path="--remote")
    host_port = url[len("sc://") :].split("/", 1)[0].split(";", 1)[0]
    host, _, port_text = host_port.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise PipelineError(f"no port in {url!r}", path="--remote") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.strip("[]") or HOST, port), timeout=1.0):
                break
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise PipelineError(
                    f"no Spark Connect server answers at {url}: {exc.strerror or exc}; "
                    "start one with `octosync pipeline server up`",
                    path="--remote",
                ) from None
            time.sleep(0.3)
    # A process is a Connect client or holds a classic session, never both: the builder
    # refuses, and ``pyspark.sql.functions`` builds one kind of column per process.
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    try:
        builder = SparkSession.builder.remote(url)
        for key, value in (REMOTE_CONF | dict(conf or {})).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.client.set_retry_policies([DefaultPolicy(**CLIENT_RETRIES)])
        return session
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipelineError(f"cannot use the Connect server at {url}: {first}") from exc


def is_remote(spark: Any) -> bool:
    """``spark`` is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parallelism(spark: Any) -> int:
    """The cores the session's jobs run on: the JVM's default parallelism in classic mode; a
    Connect client has no SparkContext, so the server's shuffle-partition count (sized for
    its cores by ``session_conf``)."""
    if is_remote(spark):
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    return int(spark.sparkContext.defaultParallelism)
