"""A Spark standalone cluster on this machine, started from the installed ``pyspark`` package.

``pyspark`` ships Spark's jars and ``bin/spark-class``, which is all a standalone master and its
workers need: no download, no ``SPARK_HOME`` to install. Every process binds to 127.0.0.1
(RPC through ``--host``, the web UIs through ``SPARK_LOCAL_IP``). What was started is written to
``DATA/spark-cluster/state.json`` (pids and ports), so ``down`` and ``status`` find it from
another shell; each process logs to a file beside it.

A pid from the state file is signalled only while ``/proc`` shows it is still one of Spark's
standalone daemons, so a stale file never kills an unrelated process that reused the pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from octosync.errors import PipelineError
from octosync.pipeline.layout import CLUSTER_SUBDIR

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "state.json"
DAEMON_MEMORY = "256m"
"""Heap of the master and worker JVMs themselves (they only schedule; executors get their own)."""


class Daemon(msgspec.Struct, frozen=True):
    """One JVM: ``role`` is ``master`` or ``worker-N``."""

    role: str
    pid: int
    port: int
    webui_port: int
    log: str


class ClusterState(msgspec.Struct, frozen=True):
    master: Daemon
    workers: list[Daemon]
    cores: int
    memory: str

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    @property
    def json_url(self) -> str:
        return f"http://{HOST}:{self.master.webui_port}/json/"

    def daemons(self) -> list[Daemon]:
        return [self.master, *self.workers]


def spark_home() -> Path:
    """The ``pyspark`` package directory: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_path(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` that ``spark-class`` will run (``JAVA_HOME`` first, as it does)."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise PipelineError("Java 17 or newer is needed and no java is on PATH (or JAVA_HOME)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def check_port_free(port: int, option: str) -> None:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            raise PipelineError(f"port {port} on {HOST} is in use", path=option) from None


def state_dir(data: Path) -> Path:
    return Path(data) / CLUSTER_SUBDIR


def read_state(data: Path) -> ClusterState | None:
    path = state_dir(data) / STATE_FILE
    if not path.exists():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=ClusterState)
    except msgspec.DecodeError as exc:
        raise PipelineError(f"unreadable cluster state: {exc}", path=str(path)) from None


def is_spark_daemon(pid: int) -> bool:
    """``pid`` runs, is not a zombie, and is a standalone master or worker JVM."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child and has exited
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[0] == "Z":
        return False
    return any(arg in (MASTER_CLASS.encode(), WORKER_CLASS.encode()) for arg in cmdline)


def master_json(state: ClusterState, timeout: float = 2.0) -> dict[str, Any] | None:
    """The master's own view (``/json/``: workers, their state, running apps), or None."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(state.json_url, timeout=timeout) as reply:
            data: dict[str, Any] = json.loads(reply.read())
            return data
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _alive_workers(view: dict[str, Any] | None) -> int:
    if view is None:
        return 0
    return sum(1 for w in view.get("workers", []) if w.get("state") == "ALIVE")


def _last_line(log: str) -> str:
    try:
        lines = [ln for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip() if lines else "empty log"


def _spawn(argv: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,  # a Ctrl-C in the shell that ran `up` leaves it running
        )


def _stop_children(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """Stop processes this call of ``up`` started (its own children: no pid check needed)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def up(
    data: Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    port: int | None = None,
    webui_port: int | None = None,
    timeout: float = 90.0,
    progress: Callable[[str], None] | None = None,
) -> ClusterState:
    """Start a master and ``workers`` workers; return once every worker has registered.

    Past ``timeout`` seconds (or when a JVM exits early), everything started is stopped and a
    ``PipelineError`` quotes the last line of the failing process's log.
    """
    say = progress or (lambda _: None)
    if workers < 1:
        raise PipelineError("at least one worker is needed", path="--workers")
    if cores < 1:
        raise PipelineError("at least one core per worker is needed", path="--worker-cores")
    existing = read_state(data)
    if existing is not None:
        if any(is_spark_daemon(d.pid) for d in existing.daemons()):
            raise PipelineError(
                f"a cluster is already up at {existing.url} (pids in "
                f"{state_dir(data) / STATE_FILE}); run `octosync pipeline cluster down` first"
            )
        (state_dir(data) / STATE_FILE).unlink()  # stale: every process of it is gone
    java_path()
    for option, value in (("--port", port), ("--webui-port", webui_port)):
        if value is not None:
            check_port_free(value, option)
    home = spark_home()
    spark_class = str(home / "bin" / "spark-class")
    root = state_dir(data)
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,  # the web UIs bind here too
        "SPARK_LOG_DIR": str(root),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # no REST submission server: it would listen on a fixed port (6066) nobody here uses
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    env.pop("SPARK_MASTER_HOST", None)
    started: list[Daemon] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        mport, mweb = port or free_port(), webui_port or free_port()
        url = f"spark://{HOST}:{mport}"
        commands = [
            (
                "master",
                mport,
                mweb,
                [MASTER_CLASS, "--host", HOST, "--port", str(mport), "--webui-port", str(mweb)],
            )
        ]
        for i in range(1, workers + 1):
            wport, wweb = free_port(), free_port()
            work = root / f"worker-{i}"
            work.mkdir(exist_ok=True)
            argv = [WORKER_CLASS, url, "--host", HOST, "--port", str(wport)]
            argv += ["--webui-port", str(wweb), "--cores", str(cores), "--memory", memory]
            commands.append((f"worker-{i}", wport, wweb, [*argv, "--work-dir", str(work)]))
        for role, rpc, web, argv in commands:
            log = root / f"{role}.log"
            procs.append(_spawn([spark_class, *argv], log, env))
            started.append(Daemon(role, procs[-1].pid, rpc, web, str(log)))
            say(f"{role} pid {procs[-1].pid} on {HOST}:{rpc} (web UI port {web})")
        master = started[0]
        state = ClusterState(master, started[1:], cores, memory)
        (root / STATE_FILE).write_bytes(msgspec.json.encode(state))
        _wait_for_workers(state, procs, timeout)
    except BaseException:
        _stop_children(procs, grace=5.0)
        with contextlib.suppress(FileNotFoundError):
            (root / STATE_FILE).unlink()
        raise
    return state


def _wait_for_workers(
    state: ClusterState, procs: list[subprocess.Popen[bytes]], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    want = len(state.workers)
    alive = 0
    while time.monotonic() < deadline:
        for d, proc in zip(state.daemons(), procs, strict=True):
            if proc.poll() is not None:
                raise PipelineError(f"{d.role} exited while starting: {_last_line(d.log)}")
        view = master_json(state)
        if view is not None and view.get("url") != state.url:
            raise PipelineError(
                f"port {state.master.webui_port} answers for {view.get('url')}, not {state.url}: "
                "another process took it; run `up` again"
            )
        alive = _alive_workers(view)
        if alive >= want:
            return
        time.sleep(0.5)
    raise PipelineError(
        f"{alive} of {want} workers registered with {state.url} within {timeout:g}s; "
        f"see the logs in {Path(state.master.log).parent}"
    )


def _stop(daemons: list[Daemon], grace: float) -> list[str]:
    """SIGTERM to every daemon (workers first), SIGKILL to those alive after ``grace`` seconds.
    Returns what happened, one line per daemon."""
    order = sorted(daemons, key=lambda d: d.role == "master")
    running = [d for d in order if is_spark_daemon(d.pid)]
    said = [f"{d.role} pid {d.pid}: already gone" for d in order if d not in running]
    for d in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(d.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while running and time.monotonic() < deadline:
        still = [d for d in running if is_spark_daemon(d.pid)]
        said += [f"{d.role} pid {d.pid}: stopped" for d in running if d not in still]
        running = still
        if running:
            time.sleep(0.2)
    for d in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(d.pid, signal.SIGKILL)
        said.append(f"{d.role} pid {d.pid}: killed after {grace:g}s")
    kill_deadline = time.monotonic() + 5.0
    while any(is_spark_daemon(d.pid) for d in running) and time.monotonic() < kill_deadline:
        time.sleep(0.1)
    return said


def down(data: Path, *, grace: float = 10.0) -> list[str]:
    """Stop the cluster recorded under ``data``; one line per process."""
    state = read_state(data)
    if state is None:
        raise PipelineError(f"no cluster is up here (no {state_dir(data) / STATE_FILE})")
    said = _stop(state.daemons(), grace)
    (state_dir(data) / STATE_FILE).unlink()
    return said


def status(data: Path) -> tuple[ClusterState, list[str]]:
    """The recorded cluster and one line per process (running or gone; ALIVE per the master)."""
    state = read_state(data)
    if state is None:
        raise PipelineError(f"no cluster is up here (no {state_dir(data) / STATE_FILE})")
    view = master_json(state)
    registered = {
        int(w.get("port", -1)): str(w.get("state", "?")) for w in (view or {}).get("workers", [])
    }
    lines = []
    for d in state.daemons():
        running = "running" if is_spark_daemon(d.pid) else "gone"
        extra = ""
        if d.role != "master":
            extra = f", master says {registered.get(d.port, 'not registered')}"
        elif view is not None:
            extra = (
                f", {_alive_workers(view)} workers alive, {len(view.get('activeapps', []))} apps"
            )
        lines.append(f"{d.role} pid {d.pid} port {d.port} web {d.webui_port}: {running}{extra}")
    return state, lines
