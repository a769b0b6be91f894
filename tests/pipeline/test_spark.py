from __future__ import annotations

import os
from typing import Any

import pytest

from octosync.errors import PipelineError
from octosync.pipeline.spark import is_loopback_cluster, local_cores, parse_conf, session_conf


def test_conf_pairs_parse_and_bad_ones_name_the_option() -> None:
    assert parse_conf(["a.b=1", "c= x=y"]) == {"a.b": "1", "c": " x=y"}
    with pytest.raises(PipelineError) as info:
        parse_conf(["novalue"])
    assert info.value.path == "--conf"


def test_defaults_are_ui_off_utc_and_overridable() -> None:
    local = session_conf("local[*]")
    assert local["spark.ui.enabled"] == "false"
    assert local["spark.sql.session.timeZone"] == "UTC"
    assert local["spark.driver.bindAddress"] == "127.0.0.1"
    cluster = session_conf("spark://h:7077", {"spark.ui.enabled": "true"})
    assert cluster["spark.ui.enabled"] == "true"
    assert "spark.driver.bindAddress" not in cluster


def test_quiet_sessions_log_errors_only_and_show_no_progress_bars() -> None:
    from octosync.pipeline.spark import QUIET_LOG4J

    quiet = session_conf("local[*]", verbose=False)
    assert quiet["spark.ui.showConsoleProgress"] == "false"
    assert (
        f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
        in (quiet["spark.driver.extraJavaOptions"])
    )
    assert "rootLogger.level = error" in QUIET_LOG4J.read_text()
    loud = session_conf("local[*]")
    assert loud["spark.ui.showConsoleProgress"] == "true"
    assert "log4j2" not in loud["spark.driver.extraJavaOptions"]


@pytest.mark.spark
def test_the_shared_session_runs_in_utc_without_ui(spark: Any) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.uiWebUrl is None
    row = spark.sql("SELECT CAST(timestamp_millis(0) AS STRING) AS t").first()
    assert row["t"] == "1970-01-01 00:00:00"


def test_local_sessions_use_the_parallel_collector_and_clusters_keep_theirs() -> None:
    from octosync.pipeline.spark import LOCAL_GC

    assert LOCAL_GC in session_conf("local[2]")["spark.driver.extraJavaOptions"]
    assert LOCAL_GC in session_conf("local[*]", verbose=False)["spark.driver.extraJavaOptions"]
    for master in ("spark://127.0.0.1:7077", "spark://10.0.0.5:7077"):
        assert LOCAL_GC not in session_conf(master)["spark.driver.extraJavaOptions"]
    mine = session_conf("local[2]", {"spark.driver.extraJavaOptions": "-Dx=1"})
    assert mine["spark.driver.extraJavaOptions"] == "-Dx=1"  # --conf replaces the default


@pytest.mark.spark
def test_the_shared_local_session_runs_the_parallel_collector(spark: Any) -> None:
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    names = [b.getName() for b in beans.getGarbageCollectorMXBeans()]
    assert any(name.startswith("PS ") for name in names), names


def test_shuffle_partitions_follow_the_cores_and_loopback_clusters_stay_on_loopback() -> None:
    assert session_conf("local")["spark.sql.shuffle.partitions"] == "2"
    assert session_conf("local[3]")["spark.sql.shuffle.partitions"] == "6"
    assert session_conf("local[2,4]")["spark.sql.shuffle.partitions"] == "4"  # N cores, retries
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("spark://127.0.0.1:7077") is None
    with pytest.raises(PipelineError) as info:
        local_cores("local[two]")
    assert info.value.path == "--master"
    on_this_machine = session_conf("spark://127.0.0.1:7077")
    assert on_this_machine["spark.driver.bindAddress"] == "127.0.0.1"
    assert on_this_machine["spark.sql.shuffle.partitions"] == "8"
    assert is_loopback_cluster("spark://localhost:7077")
    remote = session_conf("spark://10.0.0.5:7077")
    assert not is_loopback_cluster("spark://10.0.0.5:7077")
    assert "spark.sql.shuffle.partitions" not in remote  # the cluster's own choice
    for conf in (on_this_machine, remote, session_conf("local[2]")):
        assert conf["spark.sql.adaptive.enabled"] == "true"
