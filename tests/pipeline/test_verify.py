from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.cli import main
from octosync.pipeline.jobs import verify
from octosync.pipeline.transforms import frames as tf
from octosync.store.export import FRAMES_SCHEMA
from octosync.store.journal import Journal
from octosync.store.records import StreamFrame

pytestmark = pytest.mark.spark


def snap(stream: str, epoch: int, h: bytes | None = None) -> StreamFrame:
    return StreamFrame(
        stream=stream, base_epoch=epoch, epoch=epoch, snapshot=True, payload=b"S", state_hash=h
    )


def delta(stream: str, base: int, epoch: int, h: bytes | None = None) -> StreamFrame:
    return StreamFrame(
        stream=stream, base_epoch=base, epoch=epoch, snapshot=False, payload=b"D", state_hash=h
    )


def frames_df(spark: Any, frames: list[StreamFrame]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    rows = [
        (i + 1, *(getattr(f, n) for n in FRAMES_SCHEMA.names[1:-2]), 0, f.producer)
        for i, f in enumerate(frames)
    ]
    return spark.createDataFrame(rows, from_arrow_schema(FRAMES_SCHEMA))


def problems(spark: Any, frames: list[StreamFrame]) -> list[tuple[str, int, str]]:
    rows = tf.frame_problems(frames_df(spark, frames)).collect()
    return sorted((r["stream"], r["epoch"], r["problem"]) for r in rows)


def test_a_clean_stream_with_resets_and_resync_snapshots_has_no_problems(spark: Any) -> None:
    frames = [
        snap("a", 0, b"h0"),
        delta("a", 0, 1, b"h1"),
        delta("a", 1, 3),  # a delta may span several epochs
        snap("a", 3, None),  # resync snapshot at the current epoch
        delta("a", 3, 4, b"h4"),
        snap("a", 0, b"x"),  # a new producer resets the stream
        delta("a", 0, 1, b"y"),
        snap("b", 7),
    ]
    assert problems(spark, frames) == []


def test_each_problem_is_reported_at_its_epoch(spark: Any) -> None:
    frames = [
        delta("early", 0, 1),
        snap("early", 1),
        snap("g", 0),
        delta("g", 0, 1),
        delta("g", 2, 3),  # gap: epoch 2 missing
        snap("d", 0),
        delta("d", 0, 1, b"one"),
        delta("d", 0, 1, b"other"),  # duplicate with a different hash
        snap("o", 0),
        delta("o", 0, 2),
        delta("o", 1, 3),  # overlaps the previous delta
        snap("r", 0),
        delta("r", 0, 1, b"h1"),
        snap("r", 1, b"zz"),  # resync snapshot disagrees with the state the deltas reached
    ]
    assert problems(spark, frames) == [
        ("d", 1, "duplicate_epoch"),
        ("d", 1, "state_hash_mismatch"),
        ("early", 1, "no_snapshot"),
        ("g", 3, "gap"),
        ("o", 3, "overlap"),
        ("r", 1, "state_hash_mismatch"),
    ]


@st.composite
def clean_history(draw: st.DrawFn) -> list[StreamFrame]:
    frames: list[StreamFrame] = []
    for stream in draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True)):
        epoch = draw(st.integers(0, 5))
        frames.append(snap(stream, epoch))
        for _ in range(draw(st.integers(1, 12))):
            step = draw(st.integers(1, 3))
            frames.append(delta(stream, epoch, epoch + step))
            epoch += step
    return frames


@settings(max_examples=4)
@given(clean_history(), st.data())
def test_one_dropped_or_repeated_delta_is_found_at_its_epoch(
    spark: Any, frames: list[StreamFrame], data: st.DataObject
) -> None:
    assert problems(spark, frames) == []
    deltas = [i for i, f in enumerate(frames) if not f.snapshot]
    i = data.draw(st.sampled_from(deltas))
    victim = frames[i]
    later = [f for f in frames[i + 1 :] if f.stream == victim.stream]
    if data.draw(st.booleans()) and later and not later[0].snapshot:
        damaged = frames[:i] + frames[i + 1 :]
        assert problems(spark, damaged) == [(victim.stream, later[0].epoch, "gap")]
    else:
        damaged = [*frames, victim]
        assert problems(spark, damaged) == [(victim.stream, victim.epoch, "duplicate_epoch")]


def test_verify_job_and_cli_exit_status(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Journal(tmp_path / "ok") as j:
        j.append([snap("s", 0), delta("s", 0, 1), delta("s", 1, 2)])
    result = verify.run(spark, tmp_path / "ok")
    assert result.ok
    assert [(s.stream, s.frames, s.max_epoch, s.first_bad_epoch) for s in result.streams] == [
        ("s", 3, 2, None)
    ]
    assert main(["pipeline", "verify", "--journal", str(tmp_path / "ok")]) == 0

    with Journal(tmp_path / "bad") as j:
        j.append(
            [snap("s", 0), delta("s", 0, 1), delta("s", 3, 4), delta("s", 4, 5), delta("s", 6, 7)]
        )
    result = verify.run(spark, tmp_path / "bad")
    assert [s.first_bad_epoch for s in result.streams] == [4]
    assert [p.problem for p in result.problems] == ["gap", "gap"]
    capsys.readouterr()
    assert main(["pipeline", "verify", "--journal", str(tmp_path / "bad")]) == 1
    assert "first bad epoch 4" in capsys.readouterr().out


def test_a_missing_journal_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pipeline", "verify", "--journal", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert f"--journal {tmp_path / 'nope'} does not exist" in err  # refused before Spark
