"""Yjs updates for ``report``: counts and bytes per document, writer and minute against a plain
Python reading of the same rows (each example is one small Spark job)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.pipeline.transforms.yjs import updates_per_minute
from octosync.store.datasets import YJS_UPDATES_SCHEMA

pytestmark = pytest.mark.spark

T0 = 1_772_618_400_000  # 2026-03-04T10:00:00Z

update_rows = st.lists(
    st.tuples(
        st.sampled_from(["notes", "plan"]),  # document
        st.sampled_from(["r.1", "r.2", None]),  # writer (None: a compacted record)
        st.binary(min_size=2, max_size=40),  # update
        st.integers(min_value=T0, max_value=T0 + 3 * 60_000),  # recorded_ms
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=8, deadline=None)
@given(rows=update_rows)
def test_updates_per_document_writer_and_minute(
    spark: Any, rows: list[tuple[str, str | None, bytes, int]]
) -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    data = [(seq, d, u, w, None, at) for seq, (d, w, u, at) in enumerate(rows, start=1)]
    df = spark.createDataFrame(data, from_arrow_schema(YJS_UPDATES_SCHEMA))
    want: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for document, writer, update, at in rows:
        cell = want[(document, writer or "(compacted)", at - (at - T0) % 60_000)]
        cell[0] += 1
        cell[1] += len(update)
    got = {
        (r["document"], r["writer"], r["minute_ms"]): [r["updates"], r["bytes"]]
        for r in updates_per_minute(df).collect()
    }
    assert got == dict(want)
