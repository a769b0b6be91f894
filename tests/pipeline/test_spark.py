from __future__ import annotations

from typing import Any

import pytest

from octosync.errors import PipelineError
from octosync.pipeline.spark import parse_conf, session_conf


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
