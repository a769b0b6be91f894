"""What ``report`` shows of the server's own stream traffic: the hub frames in the journal.

A frame's time is ``recorded_ms``, the server's wall clock when it journalled the frame (UTC
milliseconds). A *producer* is one producing connection (the frame's ``producer``, written by
the server since it records one); a *resync* is a snapshot from a producer that had already
sent one on that stream (its state was reset mid-run, e.g. the hub asked for a fresh
snapshot). Frames journalled without a producer count as one unnamed producer per stream.
"""

from __future__ import annotations

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.activity import per_minute
from octosync.pipeline.transforms.ops import DataFrame

UNNAMED = "(unnamed)"


def frames_per_minute(frames: DataFrame) -> DataFrame:
    """``(minute_ms, stream, frames)``: frames journalled per UTC minute per stream."""
    return per_minute(frames, "recorded_ms", "stream", "frames")


def stream_traffic(frames: DataFrame) -> DataFrame:
    """Per stream: ``frames, snapshots, deltas, producers, resyncs, first_ms, last_ms,
    max_epoch``, ordered by stream."""
    named = frames.withColumn("producer", sf.coalesce(sf.col("producer"), sf.lit(UNNAMED)))
    per_producer = named.groupBy("stream", "producer").agg(
        sf.count("*").alias("frames"),
        sf.sum(sf.col("snapshot").cast("long")).alias("snapshots"),
        sf.min("recorded_ms").alias("first_ms"),
        sf.max("recorded_ms").alias("last_ms"),
        sf.max("epoch").alias("max_epoch"),
    )
    return (
        per_producer.groupBy("stream")
        .agg(
            sf.sum("frames").alias("frames"),
            sf.sum("snapshots").alias("snapshots"),
            (sf.sum("frames") - sf.sum("snapshots")).alias("deltas"),
            sf.count("*").alias("producers"),
            sf.sum(sf.greatest(sf.col("snapshots") - 1, sf.lit(0))).alias("resyncs"),
            sf.min("first_ms").alias("first_ms"),
            sf.max("last_ms").alias("last_ms"),
            sf.max("max_epoch").alias("max_epoch"),
        )
        .orderBy("stream")
    )
