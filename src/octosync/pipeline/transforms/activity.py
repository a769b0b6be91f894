"""What ``report`` charts: activity per minute, concurrent writes, hot keys."""

from __future__ import annotations

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import LWW_OPS, OR_OPS, DataFrame


def distinct_ops(ops: DataFrame) -> DataFrame:
    """Each op once: duplicates are identical rows apart from their seq and append time."""
    return ops.drop("seq", "recorded_ms").distinct()


def ops_per_minute(ops: DataFrame, by: str) -> DataFrame:
    """``(minute, <by>, ops)``: ops per HLC minute (UTC) per map or per origin."""
    minute = sf.timestamp_millis(sf.col("millis") - sf.pmod(sf.col("millis"), sf.lit(60_000)))
    return (
        ops.groupBy(minute.alias("minute"), sf.col(by))
        .agg(sf.count("*").alias("ops"))
        .orderBy("minute", by)
    )


def write_conflicts(ops: DataFrame, window_ms: int = 1_000) -> DataFrame:
    """Concurrent writes: consecutive writes to one key (in HLC order) by different origins
    whose clocks are within ``window_ms`` -- neither can be sure it saw the other.
    ``(map, key, op_id, origin, other_origin, millis, other_millis)``."""
    from pyspark.sql import Window

    w = Window.partitionBy("map", "key").orderBy("millis", "counter", "node", "op_id")
    writes = ops.where(sf.col("op").isin(*LWW_OPS, *OR_OPS)).select(
        "map",
        "key",
        "op_id",
        "origin",
        "millis",
        sf.lag("origin").over(w).alias("other_origin"),
        sf.lag("millis").over(w).alias("other_millis"),
    )
    return writes.where(
        sf.col("other_origin").isNotNull()
        & (sf.col("origin") != sf.col("other_origin"))
        & (sf.col("millis") - sf.col("other_millis") <= window_ms)
    )


def conflicts_per_key(conflicts: DataFrame, top: int) -> DataFrame:
    return (
        conflicts.groupBy("map", "key")
        .agg(sf.count("*").alias("conflicts"))
        .orderBy(sf.desc("conflicts"), "map", "key")
        .limit(top)
    )


def hottest_keys(ops: DataFrame, top: int) -> DataFrame:
    """The ``top`` keys by number of ops, ties broken by map and key (deterministic)."""
    return (
        ops.groupBy("map", "key")
        .agg(sf.count("*").alias("ops"))
        .orderBy(sf.desc("ops"), "map", "key")
        .limit(top)
    )
