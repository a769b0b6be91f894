"""The ``/yjs`` face's dataset (``yjs_updates``): what ``report`` shows of Yjs documents."""

from __future__ import annotations

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import DataFrame

MINUTE_MS = 60_000


def updates_per_minute(rows: DataFrame) -> DataFrame:
    """``(document, writer, minute_ms, updates, bytes)``: how many updates each writer sent
    to each document per UTC minute, and their size. A compacted record (no writer: many
    writers' updates merged) counts under writer ``(compacted)``."""
    writer = sf.coalesce(sf.col("writer"), sf.lit("(compacted)")).alias("writer")
    minute = (sf.floor(sf.col("recorded_ms") / MINUTE_MS) * MINUTE_MS).cast("long")
    return (
        rows.select("document", writer, minute.alias("minute_ms"), sf.length("update").alias("n"))
        .groupBy("document", "writer", "minute_ms")
        .agg(sf.count("*").alias("updates"), sf.sum("n").alias("bytes"))
        .orderBy("document", "minute_ms", "writer")
    )
