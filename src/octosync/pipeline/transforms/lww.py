"""Keys written only by LWW ops (``PUT``/``REMOVE``), converged in Spark SQL with no Python
fold: the state of such a key is its winner, the record with the greatest
``(millis, counter, node, op_id)`` (``crdt.fold``'s rule; Spark compares strings as UTF-8
bytes, Python by code point: the same order).

The winner is a ``max`` over a struct led by that order and followed by ``(seq, recorded_ms)``,
so among duplicate deliveries of the winning record the latest one is kept, as the in-process
fold's records are. Its Merkle entry hash (TopGun's ``fnv1a32("key:millis:counter:node")``) is
computed on Arrow batches with ``crdt.hashing``'s NumPy kernels: by each partition, which
sends only its per-leaf sums to the driver, or (for up to ``DRIVER_MERKLE_KEYS`` keys, where
starting Python workers costs more than moving the winners) on the driver itself, which then
also writes the snapshot and records from the same Arrow table (``*_table`` below): one Spark
action instead of a cached frame read by three.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as sf

from octosync.crdt.hashing import MASK32, fmix32_many, fnv1a32_many
from octosync.crdt.merkle import DEFAULT_DEPTH, leaf_indices
from octosync.crdt.op import OpKind
from octosync.pipeline.transforms.ops import SNAPSHOT_COLUMNS, DataFrame, is_family
from octosync.store.op_table import OPS_SCHEMA

WINNER_ORDER: Final = ("millis", "counter", "node", "op_id", "seq", "recorded_ms")
DRIVER_MERKLE_KEYS: Final = 2_000_000
LEAF_SCHEMA: Final = pa.schema([("map", pa.string()), ("leaf", pa.int32()), ("hash", pa.int64())])


def winners(carriers: DataFrame) -> DataFrame:
    """One ``OPS_SCHEMA`` row per ``(map, key)`` of the LWW rows in ``carriers``: the winner,
    in its latest delivery."""
    rest = [c for c in OPS_SCHEMA.names if c not in (*WINNER_ORDER, "map", "key")]
    best = (
        carriers.where(is_family("lww"))
        .groupBy("map", "key")
        .agg(sf.max(sf.struct(*WINNER_ORDER, *rest)).alias("w"))
    )
    return best.select(
        *(sf.col(c) if c in ("map", "key") else sf.col(f"w.{c}").alias(c) for c in OPS_SCHEMA.names)
    )


ONE_PASS_OPS: Final = 2_000_000
"""Up to this many input ops the compaction makes one pass (:func:`summary_with_winners`): a
sort-based aggregate over so few ops costs less than the second read, the broadcast and the
second action of the two-pass plan (measured in ``bench/pipeline.py``)."""

SUMMARY_COLUMNS: Final = ("ops", "other_ops", "last_seq", "families")


def summary_with_winners(ops: DataFrame) -> DataFrame:
    """Per ``(map, key)``: :func:`.ops.key_summary`'s counts (``SUMMARY_COLUMNS``) and the
    winner of its LWW ops in ``OPS_SCHEMA`` columns (null when it has none), in one aggregate
    and one shuffle. The winner is only the key's state when every op is LWW; the job checks
    the ``families`` it brings back before using it."""
    from octosync.pipeline.transforms.ops import FAMILY_BITS, family_code

    rest = [c for c in OPS_SCHEMA.names if c not in (*WINNER_ORDER, "map", "key")]
    is_lww = sf.col("code") == FAMILY_BITS["lww"]
    coded = ops.select(*OPS_SCHEMA.names, family_code().alias("code"))
    best = coded.groupBy("map", "key").agg(
        sf.count("*").alias("ops"),
        sf.count(sf.when(~is_lww, 1)).alias("other_ops"),
        sf.max("seq").alias("last_seq"),
        sf.bit_or("code").alias("families"),
        sf.max(sf.when(is_lww, sf.struct(*WINNER_ORDER, *rest))).alias("w"),
    )
    return best.select(
        *SUMMARY_COLUMNS,
        *(
            sf.col(c) if c in ("map", "key") else sf.col(f"w.{c}").alias(c)
            for c in OPS_SCHEMA.names
        ),
    )


def _tombstone() -> Any:
    return sf.col("op") == OpKind.REMOVE.value


def surviving(wins: DataFrame, gc_horizon_millis: int | None) -> DataFrame:
    """The winners still in the state after tombstone GC (a ``REMOVE`` older than the horizon
    is forgotten, as ``MapStore.gc`` does)."""
    if gc_horizon_millis is None:
        return wins
    return wins.where(~(_tombstone() & (sf.col("millis") < sf.lit(gc_horizon_millis))))


def snapshot(wins: DataFrame) -> DataFrame:
    """Snapshot rows (``SNAPSHOT_COLUMNS``): a winning ``REMOVE`` is a tombstone, value null."""
    dead = _tombstone()
    columns = {
        "value": sf.when(dead, sf.lit(None).cast("binary")).otherwise(sf.col("value")),
        "tombstone": dead,
    }
    return wins.select(*(columns.get(c, sf.col(c)).alias(c) for c in SNAPSHOT_COLUMNS))


def surviving_table(wins: pa.Table, gc_horizon_millis: int | None) -> pa.Table:
    """:func:`surviving` on winners collected to the driver."""
    if gc_horizon_millis is None:
        return wins
    dead = pc.equal(wins.column("op"), OpKind.REMOVE.value)
    old = pc.less(wins.column("millis"), gc_horizon_millis)
    return wins.filter(pc.invert(pc.and_(dead, old)))


SNAPSHOT_SCHEMA: Final = pa.schema(
    [
        ("map", pa.string()),
        ("key", pa.string()),
        ("value", pa.binary()),
        ("millis", pa.int64()),
        ("counter", pa.int32()),
        ("node", pa.string()),
        ("tombstone", pa.bool_()),
    ]
)


def snapshot_table(live: pa.Table) -> pa.Table:
    """:func:`snapshot` on winners collected to the driver (``SNAPSHOT_SCHEMA``)."""
    dead = pc.equal(live.column("op"), OpKind.REMOVE.value)
    value = pc.if_else(dead, pa.scalar(None, pa.binary()), live.column("value"))
    columns = {"value": value, "tombstone": dead}
    return pa.table(
        [columns[c] if c in columns else live.column(c) for c in SNAPSHOT_COLUMNS],
        schema=SNAPSHOT_SCHEMA,
    )


def records_table(wins: pa.Table) -> pa.Table:
    """The winners as op records (``OPS_SCHEMA``), collected to the driver."""
    return wins.select(OPS_SCHEMA.names).cast(OPS_SCHEMA)


def leaf_sums(
    batches: Iterable[pa.RecordBatch], depth: int = DEFAULT_DEPTH
) -> Iterator[pa.RecordBatch]:
    """``LEAF_SCHEMA`` sums of the entry hashes of winners (``map, key, millis, counter,
    node`` batches): the kernel of :func:`leaves`, also run on the driver by the job."""
    sums: dict[tuple[str, int], int] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        keys = batch.column("key").to_pylist()
        routes = fnv1a32_many(keys)
        suffixes = [
            f":{m}:{c}:{n}"
            for m, c, n in zip(
                batch.column("millis").to_pylist(),
                batch.column("counter").to_pylist(),
                batch.column("node").to_pylist(),
                strict=True,
            )
        ]
        mixed = fmix32_many(fnv1a32_many(suffixes, routes)).astype(np.int64)
        leaves = leaf_indices(routes, depth).astype(np.int64)
        maps = np.array(batch.column("map").to_pylist(), dtype=object)
        for name in set(maps.tolist()):
            at = np.flatnonzero(maps == name)
            present, where = np.unique(leaves[at], return_inverse=True)
            totals = np.zeros(len(present), np.int64)
            np.add.at(totals, where, mixed[at])
            for leaf, h in zip(present.tolist(), totals.tolist(), strict=True):
                sums[(name, leaf)] = (sums.get((name, leaf), 0) + h) & MASK32
    if sums:
        yield pa.RecordBatch.from_pydict(
            {
                "map": [m for m, _ in sums],
                "leaf": [leaf for _, leaf in sums],
                "hash": list(sums.values()),
            },
            schema=LEAF_SCHEMA,
        )


LEAF_INPUT: Final = ("map", "key", "millis", "counter", "node")


def leaves(wins: DataFrame, depth: int = DEFAULT_DEPTH) -> DataFrame:
    """``(map, leaf, hash)``: each partition's fmix32 sum of its winners' entry hashes per leaf
    (the driver adds the partitions' shares, :func:`.merkle.tree_table`)."""
    from functools import partial

    from pyspark.sql.pandas.types import from_arrow_schema

    return wins.select(*LEAF_INPUT).mapInArrow(
        partial(leaf_sums, depth=depth), from_arrow_schema(LEAF_SCHEMA)
    )
