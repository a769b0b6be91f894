"""SparkSession factory: the same jobs run on a laptop (``local[*]``) or any Spark cluster.

Defaults chosen for octosync: UI off (no port opened behind the user's back), UTC session time
zone (hour/minute buckets mean the same everywhere), the driver bound to loopback in local mode
and on a cluster on this machine, adaptive execution on, and a shuffle-partition count sized
for the cores (Spark's default of 200 is tuned for big clusters and costs seconds of task
overhead per job on two cores). ``--conf k=v`` overrides any
of them.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import IO, Any

from octosync.errors import PipelineError

DEFAULT_MASTER = "local[*]"


def parse_conf(pairs: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` from the command line; a pair without ``=`` is a clear error."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"expected KEY=VALUE, got {pair!r}", path="--conf")
        conf[key.strip()] = value
    return conf


SMALL_CLUSTER_SHUFFLE_PARTITIONS = 8
"""Shuffle partitions on a cluster on this machine (a handful of cores, not Spark's 200)."""

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
"""Errors only: a job prints its own line per stage (``verbose`` keeps Spark's defaults)."""


def local_cores(master: str) -> int | None:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master; None for
    any other master."""
    if master == "local":
        return 1
    if not (master.startswith("local[") and master.endswith("]")):
        return None
    first = master[len("local[") : -1].split(",")[0].strip()
    if first == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(first))
    except ValueError:
        raise PipelineError(f"not a Spark master URL: {master!r}", path="--master") from None


LOCAL_GC = "-XX:+UseParallelGC"
"""The collector of a local-mode JVM (driver and executor in one): a job is a burst of
short-lived batches where throughput counts, and on a few cores G1's concurrent threads and
write barriers cost the tasks more than Parallel GC's pauses (measured in
``bench/pipeline.py``'s stages: about a tenth of the JVM's CPU time)."""

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def is_loopback_cluster(master: str) -> bool:
    """A standalone master on this machine (what ``octosync pipeline cluster up`` starts)."""
    if not master.startswith("spark://"):
        return False
    host = master[len("spark://") :].rsplit(":", 1)[0]
    return host in LOOPBACK_HOSTS


def session_conf(
    master: str, conf: Mapping[str, str] | None = None, *, verbose: bool = True
) -> dict[str, str]:
    cores = local_cores(master)
    local = cores is not None
    driver_opts = "-Duser.timezone=UTC"
    if local:
        driver_opts += f" {LOCAL_GC}"
    if not verbose:
        driver_opts += f" -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if verbose else "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # adaptive execution: joins turn into broadcasts and small shuffles are coalesced
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
    }
    if local or is_loopback_cluster(master):
        settings |= {  # executors reach the driver on loopback; nothing listens elsewhere
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
    if cores is not None:
        settings["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
    elif is_loopback_cluster(master):
        settings["spark.sql.shuffle.partitions"] = str(SMALL_CLUSTER_SHUFFLE_PARTITIONS)
    settings |= dict(conf or {})
    return settings


def build_session(
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    *,
    app_name: str = "octosync",
    verbose: bool = True,
    start_timeout: float | None = None,
) -> Any:
    """A ``pyspark.sql.SparkSession`` (typed ``Any``: pyspark ships no usable stubs here).

    ``verbose=False`` keeps Spark to errors (no JVM log lines, no console progress bars).
    ``start_timeout`` bounds the wait for the session (a ``--master`` nobody answers at keeps
    Spark retrying for minutes): past it, a ``PipelineError`` says so in one line.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use our interpreter
    if local_cores(master) is not None or is_loopback_cluster(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to loopback" warning
    from pyspark.sql import SparkSession

    settings = {"spark.master": master, "spark.app.name": app_name}
    settings |= session_conf(master, conf, verbose=verbose)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    _JVM_STDERR.quiet = not verbose
    start = partial(_start, builder, master, settings)
    session = start() if start_timeout is None else _start_within(start, master, start_timeout)
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


def _start_within(start: Callable[[], Any], master: str, timeout: float) -> Any:
    """``start`` on a daemon thread, given up after ``timeout`` seconds (the thread is left to
    Spark's own retries; the JVM exits with this process)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(start())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=run, name="spark-start", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        raise PipelineError(
            f"no Spark session from {master} within {timeout:g}s; is the master running and "
            "reachable from here? (--master-timeout waits longer)",
            path="--master",
        )
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


JVM_NOTICES = (b"WARNING: Using incubator modules:",)
"""Lines the JVM itself prints at start-up, whatever log4j says (Spark's launcher always adds
``--add-modules=jdk.incubator.vector``); a quiet session drops them."""


class _JvmStderr:
    """Copies the JVM's stderr to ours line by line, leaving out ``JVM_NOTICES`` when quiet.

    The JVM is PySpark's child; giving it a pipe instead of our stderr is the only way to keep
    its own start-up notice off the terminal. Everything else (errors, Python worker
    tracebacks, ``-v`` output) passes through unchanged.
    """

    def __init__(self) -> None:
        self.quiet = True

    def pump(self, pipe: IO[bytes]) -> None:
        for line in iter(pipe.readline, b""):
            if self.quiet and line.startswith(JVM_NOTICES):
                continue
            try:
                os.write(2, line)
            except OSError:
                return


_JVM_STDERR = _JvmStderr()


def _launch_gateway(settings: Mapping[str, str]) -> None:
    """Start PySpark's JVM gateway with its stderr piped through ``_JVM_STDERR`` (once per
    process; later sessions reuse the gateway, as PySpark does)."""
    from subprocess import PIPE

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        spark_conf.set(key, value)
    gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": PIPE})  # type: ignore[no-untyped-call]
    threading.Thread(
        target=_JVM_STDERR.pump, args=(gateway.proc.stderr,), name="spark-stderr", daemon=True
    ).start()
    SparkContext._ensure_initialized(gateway=gateway)


def _start(builder: Any, master: str, settings: Mapping[str, str]) -> Any:
    try:
        _launch_gateway(settings)
        return builder.getOrCreate()
    except Exception as exc:  # the JVM did not start: say why in our terms, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipelineError(f"cannot start Spark ({master}): {first}", path="--master") from exc
