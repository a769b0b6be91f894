"""Stream frames for ``verify``: each stream replayed in epoch order, and what is wrong."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import DataFrame

PROBLEM_KINDS = (
    "no_snapshot",
    "gap",
    "duplicate_epoch",
    "overlap",
    "state_hash_mismatch",
)


def frame_problems(frames: DataFrame) -> DataFrame:
    """Replays each stream in epoch order and lists what is wrong:
    ``(stream, epoch, seq, problem, detail)``.

    The journal order splits a stream into generations, one per snapshot (a snapshot resets the
    stream). Within a generation, frames are replayed in epoch order (ties by seq): a delta must
    start where the previous frame ended (``base_epoch > previous`` is a ``gap``, ``<`` an
    ``overlap``), two frames ending at the same epoch are a ``duplicate_epoch``, and two frames
    that state the same epoch with different state hashes (including a resync snapshot and the
    frame just before it) are a ``state_hash_mismatch``. Deltas before any snapshot:
    ``no_snapshot``.
    """
    from pyspark.sql import Window

    by_seq = Window.partitionBy("stream").orderBy("seq")
    numbered = frames.select(
        "stream",
        "seq",
        "base_epoch",
        "epoch",
        "snapshot",
        "state_hash",
        sf.sum(sf.col("snapshot").cast("int"))
        .over(by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        .alias("gen"),
        sf.lag("epoch").over(by_seq).alias("seq_prev_epoch"),
        sf.lag("state_hash").over(by_seq).alias("seq_prev_hash"),
    )
    by_epoch = Window.partitionBy("stream", "gen").orderBy("epoch", "seq")
    replay = numbered.select(
        "*",
        sf.lag("epoch").over(by_epoch).alias("prev_epoch"),
        sf.lag("state_hash").over(by_epoch).alias("prev_hash"),
    )
    delta = ~sf.col("snapshot")
    prev = sf.col("prev_epoch")
    same_epoch = prev.isNotNull() & (sf.col("epoch") == prev)

    def hashes_differ(other: str) -> Any:
        return (
            sf.col("state_hash").isNotNull()
            & sf.col(other).isNotNull()
            & (sf.col("state_hash") != sf.col(other))
        )

    checks = [
        ("no_snapshot", sf.col("gen") == 0, sf.lit("delta before any snapshot")),
        (
            "gap",
            delta & (sf.col("gen") > 0) & prev.isNotNull() & (sf.col("base_epoch") > prev),
            sf.format_string("epochs %d..%d missing", prev + 1, sf.col("base_epoch")),
        ),
        (
            "overlap",
            delta
            & (sf.col("gen") > 0)
            & ~same_epoch
            & (prev.isNull() | (sf.col("base_epoch") < prev)),
            sf.format_string("delta from %d, but the replay is at %s", sf.col("base_epoch"), prev),
        ),
        (
            "duplicate_epoch",
            delta & (sf.col("gen") > 0) & same_epoch,
            sf.format_string("epoch %d already replayed", sf.col("epoch")),
        ),
        (
            "state_hash_mismatch",
            (same_epoch & hashes_differ("prev_hash"))
            | (
                sf.col("snapshot")
                & (sf.col("epoch") == sf.col("seq_prev_epoch"))
                & hashes_differ("seq_prev_hash")
            ),
            sf.format_string("two different state hashes for epoch %d", sf.col("epoch")),
        ),
    ]
    found = None
    for name, condition, detail in checks:
        part = replay.where(condition).select(
            "stream", "epoch", "seq", sf.lit(name).alias("problem"), detail.alias("detail")
        )
        found = part if found is None else found.unionByName(part)
    return found


def stream_summary(frames: DataFrame, problems: DataFrame) -> DataFrame:
    """Per stream: frames, snapshots, epoch range, problem count and the first bad epoch."""
    counts = frames.groupBy("stream").agg(
        sf.count("*").alias("frames"),
        sf.sum(sf.col("snapshot").cast("int")).alias("snapshots"),
        sf.min("epoch").alias("min_epoch"),
        sf.max("epoch").alias("max_epoch"),
    )
    bad = problems.groupBy("stream").agg(
        sf.count("*").alias("problems"), sf.min("epoch").alias("first_bad_epoch")
    )
    return counts.join(bad, "stream", "left").select(
        "stream",
        "frames",
        "snapshots",
        "min_epoch",
        "max_epoch",
        sf.coalesce("problems", sf.lit(0)).alias("problems"),
        "first_bad_epoch",
    )
