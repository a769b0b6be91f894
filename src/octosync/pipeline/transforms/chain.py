"""The chain face's datasets (``chain_events``, ``chain_states``): what ``report`` shows of a
chain, and what ``stream`` counts.

A device re-sends the events it still holds when it bootstraps again, and each server run
journals each state change once, so both datasets may hold a record twice: every transform
first keeps each event's first record (lowest ``seq``: when the server first saw it) and each
state change's first record.
"""

from __future__ import annotations

from pyspark.sql import functions as sf

from octosync.pipeline.transforms.ops import DataFrame

EVENT_KEY = ("chain", "device", "device_sequencer")


def first_records(rows: DataFrame, key: tuple[str, ...]) -> DataFrame:
    """The record with the lowest ``seq`` per ``key`` (deterministic: seqs are unique)."""
    firsts = rows.groupBy(*key).agg(sf.min("seq").alias("seq"))
    return rows.join(firsts, [*key, "seq"], "left_semi")


def distinct_events(events: DataFrame) -> DataFrame:
    return first_records(events, EVENT_KEY)


def distinct_states(states: DataFrame) -> DataFrame:
    return first_records(states, ("chain", "sequencer"))


def events_by_device(events: DataFrame) -> DataFrame:
    """``(chain, device, events, first_ms, last_ms)`` over distinct events."""
    return (
        events.groupBy("chain", "device")
        .agg(
            sf.count("*").alias("events"),
            sf.min("recorded_ms").alias("first_ms"),
            sf.max("recorded_ms").alias("last_ms"),
        )
        .orderBy(sf.desc("events"), "chain", "device")
    )


def events_by_name(events: DataFrame) -> DataFrame:
    """``(chain, name, events, devices)`` over distinct events."""
    return (
        events.groupBy("chain", "name")
        .agg(sf.count("*").alias("events"), sf.countDistinct("device").alias("devices"))
        .orderBy(sf.desc("events"), "chain", "name")
    )


def consumption(events: DataFrame, states: DataFrame) -> DataFrame:
    """Each distinct event the server saw and the first state change that consumed it:
    ``(chain, device, device_sequencer, name, event_ms, state_ms, sequencer, latency_ms)``;
    ``latency_ms`` is from the event's arrival at the server to the state change's."""
    consumed = distinct_states(states).select(
        "chain",
        "sequencer",
        sf.col("recorded_ms").alias("state_ms"),
        sf.col("seq").alias("state_seq"),
        sf.explode("consumed").alias("c"),
    )
    consumed = consumed.select(
        "chain",
        "sequencer",
        "state_ms",
        "state_seq",
        sf.col("c.device").alias("device"),
        sf.col("c.device_sequencer").alias("device_sequencer"),
    )
    consumed = first_records(consumed.withColumnRenamed("state_seq", "seq"), EVENT_KEY)
    seen = distinct_events(events).select(
        *EVENT_KEY, "name", sf.col("recorded_ms").alias("event_ms")
    )
    return seen.join(consumed.drop("seq"), list(EVENT_KEY)).withColumn(
        "latency_ms", sf.col("state_ms") - sf.col("event_ms")
    )


def latency_by_name(consumed: DataFrame) -> DataFrame:
    """``(chain, name, consumed, p50_ms, p99_ms, max_ms)``: from device event to the state
    change that consumed it, exact percentiles (linear interpolation)."""
    return (
        consumed.groupBy("chain", "name")
        .agg(
            sf.count("*").alias("consumed"),
            sf.percentile("latency_ms", sf.lit(0.5)).alias("p50_ms"),
            sf.percentile("latency_ms", sf.lit(0.99)).alias("p99_ms"),
            sf.max("latency_ms").alias("max_ms"),
        )
        .orderBy("chain", "name")
    )
