"""Stream traffic for ``report``: per-stream counts, producers and resyncs against a plain
Python reading of the same frames (each example is one small Spark job)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.pipeline.transforms.traffic import UNNAMED, frames_per_minute, stream_traffic
from octosync.store.export import FRAMES_SCHEMA

pytestmark = pytest.mark.spark

T0 = 1_772_618_400_000  # 2026-03-04T10:00:00Z

frame_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # stream
        st.sampled_from(["r.1", "r.2", None]),  # producer (None: journalled without one)
        st.booleans(),  # snapshot
        st.integers(min_value=T0, max_value=T0 + 5 * 60_000),  # recorded_ms
    ),
    min_size=1,
    max_size=30,
)


def frames_df(spark: Any, rows: list[tuple[str, str | None, bool, int]]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    def row(seq: int, stream: str, producer: str | None, snap: bool, at: int) -> tuple[Any, ...]:
        named = {"seq": seq, "stream": stream, "base_epoch": 0, "epoch": seq, "snapshot": snap}
        named |= {"payload": b"p", "recorded_ms": at, "producer": producer}
        return tuple(named.get(n) for n in FRAMES_SCHEMA.names)  # codec, state_hash: null

    data = [row(seq, *frame) for seq, frame in enumerate(rows, start=1)]
    return spark.createDataFrame(data, from_arrow_schema(FRAMES_SCHEMA))


@settings(max_examples=8, deadline=None)
@given(rows=frame_rows)
def test_traffic_counts_frames_producers_and_resyncs(
    spark: Any, rows: list[tuple[str, str | None, bool, int]]
) -> None:
    snaps: dict[tuple[str, str], int] = defaultdict(int)
    frames: dict[str, list[int]] = defaultdict(list)
    for stream, producer, snap, at in rows:
        snaps[(stream, producer or UNNAMED)] += snap
        frames[stream].append(at)
    got = {r["stream"]: r.asDict() for r in stream_traffic(frames_df(spark, rows)).collect()}
    assert sorted(got) == sorted(frames)
    for stream, times in frames.items():
        mine = {p: n for (s, p), n in snaps.items() if s == stream}
        row = got[stream]
        assert row["frames"] == len(times)
        assert row["snapshots"] == sum(mine.values())
        assert row["deltas"] == len(times) - sum(mine.values())
        assert row["producers"] == len(mine)
        assert row["resyncs"] == sum(max(n - 1, 0) for n in mine.values())
        assert (row["first_ms"], row["last_ms"]) == (min(times), max(times))


def test_frames_per_minute_buckets_by_utc_minute_of_the_journal_time(spark: Any) -> None:
    rows = [("a", "r.1", True, T0 + 59_999), ("a", "r.1", False, T0 + 60_000)]
    rows += [("b", None, True, T0 + 1)]
    got = sorted(tuple(r) for r in frames_per_minute(frames_df(spark, rows)).collect())
    assert got == [(T0, "a", 1), (T0, "b", 1), (T0 + 60_000, "a", 1)]
