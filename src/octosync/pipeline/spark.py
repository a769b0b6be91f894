"""SparkSession factory: the same jobs run on a laptop (``local[*]``) or any Spark cluster.

Defaults chosen for octosync: UI off (no port opened behind the user's back), UTC session time
zone (hour/minute buckets mean the same everywhere), the driver bound to loopback in local mode,
and a modest shuffle-partition count for local mode (Spark's default of 200 is tuned for
clusters and costs seconds of task overhead per job on two cores). ``--conf k=v`` overrides any
of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

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


def session_conf(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    local = master.startswith("local")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if local:
        settings |= {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "8",
        }
    settings |= dict(conf or {})
    return settings


def build_session(
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    *,
    app_name: str = "octosync",
) -> Any:
    """A ``pyspark.sql.SparkSession`` (typed ``Any``: pyspark ships no usable stubs here)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use our interpreter
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start: say why in our terms
        raise PipelineError(f"cannot start Spark ({master}): {exc}", path="spark") from exc
    session.sparkContext.setLogLevel("WARN")
    return session
