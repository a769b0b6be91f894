"""The dataspace face's dataset (``dataspace``): what ``report`` shows and ``stream`` counts."""

from __future__ import annotations

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import DataFrame

ACTIONS = ("assert", "retract", "message")


def activity_by_label(rows: DataFrame) -> DataFrame:
    """``(dataspace, label, asserts, retracts, messages, peers)``: what each dataspace took
    per record label (``peers``: distinct connections)."""
    counts = [sf.count(sf.when(sf.col("action") == a, True)).alias(f"{a}s") for a in ACTIONS]
    return (
        rows.groupBy("dataspace", "label")
        .agg(*counts, sf.countDistinct("peer").alias("peers"))
        .orderBy("dataspace", "label")
    )


def assertion_lifetimes(rows: DataFrame) -> DataFrame:
    """Each retracted assertion: ``(dataspace, label, peer, handle, lifetime_ms)``. Server
    handles restart with each run, and ``peer`` names the run, so ``(peer, handle)`` is one
    assertion."""
    key = ["dataspace", "peer", "handle"]
    asserted = rows.where(sf.col("action") == "assert").select(
        *key, "label", sf.col("recorded_ms").alias("asserted_ms")
    )
    retracted = rows.where(sf.col("action") == "retract").select(
        *key, sf.col("recorded_ms").alias("retracted_ms")
    )
    return asserted.join(retracted, key).select(
        "dataspace",
        "label",
        "peer",
        "handle",
        (sf.col("retracted_ms") - sf.col("asserted_ms")).alias("lifetime_ms"),
    )


def lifetime_by_label(lifetimes: DataFrame) -> DataFrame:
    """``(dataspace, label, retracted, lifetime_p50_ms, lifetime_max_ms)``."""
    return lifetimes.groupBy("dataspace", "label").agg(
        sf.count("*").alias("retracted"),
        sf.percentile("lifetime_ms", sf.lit(0.5)).alias("lifetime_p50_ms"),
        sf.max("lifetime_ms").alias("lifetime_max_ms"),
    )
