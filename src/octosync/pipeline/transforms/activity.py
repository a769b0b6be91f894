"""What ``report`` charts: activity per minute, concurrent writes, hot keys."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import LWW_OPS, OR_OPS, DataFrame


def distinct_ops(ops: DataFrame) -> DataFrame:
    """Each op once: duplicates are identical rows apart from their seq and append time."""
    return ops.drop("seq", "recorded_ms").distinct()


MINUTE_MS = 60_000


def minute_of(millis_col: str) -> Column:
    """The start of the UTC minute holding ``millis_col`` (milliseconds since the epoch), as
    milliseconds since the epoch: a plain long, so no time-zone or unit conversion happens
    between Spark and the chart (the chart turns it into a UTC datetime once)."""
    return sf.col(millis_col) - sf.pmod(sf.col(millis_col), sf.lit(MINUTE_MS))


def per_minute(rows: DataFrame, millis_col: str, by: str, count_as: str) -> DataFrame:
    """``(minute_ms, <by>, <count_as>)``: rows per UTC minute of ``millis_col`` per ``by``."""
    return (
        rows.groupBy(minute_of(millis_col).alias("minute_ms"), sf.col(by))
        .agg(sf.count("*").alias(count_as))
        .orderBy("minute_ms", by)
    )


def ops_per_minute(ops: DataFrame, by: str) -> DataFrame:
    """``(minute_ms, <by>, ops)``: ops per HLC minute (UTC) per map or per origin."""
    return per_minute(ops, "millis", by, "ops")


def time_range(rows: DataFrame, millis_col: str) -> tuple[int, int] | None:
    """The first and last ``millis_col`` (ms since the epoch), or None for no rows."""
    row = rows.agg(sf.min(millis_col).alias("lo"), sf.max(millis_col).alias("hi")).first()
    if row is None or row["lo"] is None:
        return None
    return int(row["lo"]), int(row["hi"])


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
