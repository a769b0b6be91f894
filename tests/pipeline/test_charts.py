"""The report's charts without Spark: buckets and their coverage, rates, the drawn axes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.pipeline.charts import (
    BUCKETS,
    MAX_BUCKETS,
    MINUTE_MS,
    Drawn,
    bucket_size,
    buckets,
    rate_chart,
    rate_table,
)

T0 = int(datetime(2026, 3, 4, 10, 0, tzinfo=UTC).timestamp() * 1000)
ms = st.integers(min_value=T0, max_value=T0 + 30 * MINUTE_MS)


@given(ms, st.integers(min_value=0, max_value=10 * MINUTE_MS))
def test_minutes_cover_the_range_exactly_and_only_its_ends_are_partial(
    first: int, length: int
) -> None:
    last = first + length
    spans = buckets(first, last)
    assert spans[0].start_ms == first
    assert spans[-1].end_ms == last + 1
    for a, b in itertools.pairwise(spans):
        assert a.end_ms == b.start_ms
        assert b.bucket_ms - a.bucket_ms == MINUTE_MS
    for m in spans:
        assert m.bucket_ms % MINUTE_MS == 0
        assert m.bucket_ms <= m.start_ms < m.end_ms <= m.bucket_ms + MINUTE_MS
    assert not any(m.partial for m in spans[1:-1])
    assert spans[0].partial == (first % MINUTE_MS != 0 or last - first + 1 < MINUTE_MS)


def test_a_range_on_minute_boundaries_has_no_partial_minute() -> None:
    spans = buckets(T0, T0 + 3 * MINUTE_MS - 1)
    assert [m.partial for m in spans] == [False, False, False]
    with pytest.raises(ValueError, match="ends before it starts"):
        buckets(T0, T0 - 1)


def test_rates_are_over_covered_seconds_and_empty_minutes_are_zero() -> None:
    first, last = T0 + 45_000, T0 + 3 * MINUTE_MS + 14_999  # 15 s, two full minutes, 15 s
    counts = pd.DataFrame(
        {"minute_ms": [T0, T0, T0 + 3 * MINUTE_MS], "map": ["a", "b", "a"], "ops": [30, 3, 60]}
    )
    table = rate_table(counts, "map", "ops", (first, last))
    rows = {(r.bucket, r.map): r for r in table.itertuples()}
    assert len(rows) == 8  # four minutes, two maps
    assert rows[("2026-03-04T10:00Z", "a")].per_s == 2.0  # 30 ops over 15 s, not 0.5/s
    assert rows[("2026-03-04T10:00Z", "a")].partial
    assert rows[("2026-03-04T10:01Z", "a")].ops == 0  # no row: a real zero
    assert not rows[("2026-03-04T10:01Z", "a")].partial
    assert rows[("2026-03-04T10:03Z", "a")].per_s == 4.0
    with pytest.raises(ValueError, match="outside"):
        rate_table(counts, "map", "ops", (T0 + MINUTE_MS, last))


def drawn_for(first: int, last: int, tmp_path: Path) -> tuple[Drawn, list[int]]:
    spans = buckets(first, last)
    counts = pd.DataFrame(
        {
            "minute_ms": [m.bucket_ms for m in spans],
            "stream": ["s"] * len(spans),
            "frames": [7] * len(spans),
        }
    )
    table = rate_table(counts, "stream", "frames", (first, last))
    drawn = rate_chart(
        table,
        "stream",
        (first, last),
        title="t",
        ylabel="frames/s",
        clock="test",
        path=tmp_path / "c.png",
    )
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    return drawn, [m.bucket_ms for m in spans]


@settings(max_examples=15)  # each example draws a PNG
@given(first=ms, length=st.integers(min_value=1, max_value=8 * MINUTE_MS))
def test_the_axis_is_the_datas_real_time_range(
    first: int, length: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    last = first + length
    drawn, _ = drawn_for(first, last, tmp_path_factory.mktemp("chart"))
    assert (drawn.x_from_ms, drawn.x_to_ms) == (first, last)
    labels = [t for t in drawn.tick_labels if t]
    assert labels
    assert all(t.startswith("2026-03-04") for t in labels), labels


def test_partial_first_and_last_minutes_are_labelled_and_full_ones_are_not(
    tmp_path: Path,
) -> None:
    drawn, spans = drawn_for(T0 + 20_000, T0 + 4 * MINUTE_MS + 10_000, tmp_path)
    assert drawn.partial_labels == (spans[0], spans[-1])
    aligned, _ = drawn_for(T0, T0 + 2 * MINUTE_MS - 1, tmp_path)
    assert aligned.partial_labels == ()
    assert aligned.series == ("s",)


@given(
    first=st.integers(min_value=0, max_value=T0),
    length=st.integers(min_value=0, max_value=60 * 365 * 24 * 60 * MINUTE_MS),
)
def test_the_bucket_is_the_smallest_that_keeps_a_chart_readable(first: int, length: int) -> None:
    size = bucket_size(first, first + length)
    assert len(buckets(first, first + length, size)) <= MAX_BUCKETS
    smaller = [s for s in BUCKETS if s < size]
    if smaller:
        assert len(buckets(first, first + length, smaller[-1])) > MAX_BUCKETS


def test_one_op_with_an_ancient_clock_widens_the_buckets_instead_of_hanging() -> None:
    counts = pd.DataFrame(
        {"minute_ms": [0, T0], "map": ["m", "m"], "ops": [1, 5]}
    )  # one op at 1970-01-01, five in 2026
    table = rate_table(counts, "map", "ops", (0, T0 + 59_999))
    assert len(table) <= MAX_BUCKETS
    assert set(table["bucket_s"]) == {30 * 24 * 3600}  # 683 of them; weeks would be 2,930
    assert table["ops"].sum() == 6
    assert table["bucket"].iloc[0] == "1970-01-01T00:00Z"
