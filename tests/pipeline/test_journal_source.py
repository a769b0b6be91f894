"""``format("octosync-journal")``: the SQLite journal read by Spark, batch and streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.pipeline.journal_source import NAME, register, seq_ranges
from octosync.store.journal import Journal
from octosync.store.op_table import op_table
from octosync.store.synthetic import generate_records
from tests.pipeline.helpers import frame


@given(first=st.integers(1, 500), count=st.integers(0, 500), size=st.integers(1, 120))
def test_seq_ranges_cover_every_seq_once_in_order(first: int, count: int, size: int) -> None:
    last = first + count - 1
    ranges = seq_ranges("d", "ops", first, last, size)
    seqs = [s for r in ranges for s in range(r.lo, r.hi + 1)]
    assert seqs == list(range(first, last + 1))
    assert all(1 <= r.hi - r.lo + 1 <= size for r in ranges)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("journal")
    with Journal(data) as j:
        j.append(generate_records(600, seed=3))
        j.append([frame("a", 0, 0, True), frame("a", 0, 1, False)])
        j.append(generate_records(400, seed=4))
    return data


def rows(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in df.orderBy("seq").collect()]


@pytest.mark.spark
def test_a_batch_read_is_the_journal_in_seq_ranges(spark: Any, data: Path) -> None:
    register(spark)
    df = spark.read.format(NAME).option("partitionSeqs", "250").load(str(data))
    assert df.rdd.getNumPartitions() == 5  # seqs 1..1002
    with Journal(data, readonly=True) as j:
        entries = [e for e in j.read() if e.kind == "op"]
    expected = op_table(
        [e.record for e in entries],  # type: ignore[misc]
    ).to_pylist()
    got = rows(df)
    assert [r[0] for r in got] == [e.seq for e in entries]
    assert [r[1:-1] for r in got] == [tuple(x.values())[1:-1] for x in expected]
    assert [r[-1] for r in got] == [e.recorded_ms for e in entries]

    frames = spark.read.format(NAME).option("kind", "frames").load(str(data))
    assert [(r["seq"], r["stream"], r["epoch"]) for r in frames.orderBy("seq").collect()] == [
        (601, "a", 0),
        (602, "a", 1),
    ]
    part = spark.read.format(NAME).option("startSeq", "590").option("endSeq", "610").load(str(data))
    assert [r[0] for r in rows(part)] == [*range(590, 601), *range(603, 611)]


@pytest.mark.spark
def test_a_stream_reads_each_seq_once_across_restarts(
    spark: Any, data: Path, tmp_path: Path
) -> None:
    register(spark)
    copy = tmp_path / "data"
    with Journal(data, readonly=True) as src, Journal(copy) as dst:
        dst.append([e.record for e in src.read(1, 300)])
    seen: list[int] = []
    checkpoint = str(tmp_path / "checkpoint")

    batches: list[int] = []

    def run() -> None:
        def collect(batch: Any, batch_id: int) -> None:
            batches.append(batch_id)
            seen.extend(r["seq"] for r in batch.select("seq").collect())

        query = (
            spark.readStream.format(NAME)
            .option("maxRecordsPerBatch", "120")
            .option("partitionSeqs", "50")
            .load(str(copy))
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

    run()
    assert sorted(seen) == list(range(1, 301))
    assert len(batches) >= 3  # at most 120 seqs a batch
    with Journal(data, readonly=True) as src, Journal(copy) as dst:
        dst.append([e.record for e in src.read(301, 700)])
    run()  # a restart from the checkpoint: only what came after
    with Journal(copy, readonly=True) as j:
        ops = [e.seq for e in j.read() if e.kind == "op"]
    assert seen == sorted(seen)
    assert seen == ops
