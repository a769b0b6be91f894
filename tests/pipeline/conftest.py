"""One local[2] SparkSession for every pipeline test: the JVM start-up is paid once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from octosync.pipeline.spark import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    session = build_session("local[2]", conf, app_name="octosync-tests")
    yield session
    session.stop()
