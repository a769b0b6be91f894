"""Op families, the HLC order, and the one pass over the input that the compaction makes
first: a per-key summary from which the job learns its totals and picks the rows it needs."""

from __future__ import annotations

from typing import Any, NamedTuple

from pyspark.sql import functions as sf

from octosync.crdt.fold import SnapshotRow
from octosync.crdt.op import OpKind

DataFrame = Any  # pyspark.sql.DataFrame; pyspark ships no stubs mypy can use here

LWW_OPS = (OpKind.PUT.value, OpKind.REMOVE.value)
OR_OPS = (OpKind.OR_ADD.value, OpKind.OR_REMOVE.value)
COUNTER_OPS = (OpKind.INC.value,)
FAMILY_OPS = {"lww": LWW_OPS, "or": OR_OPS, "counter": COUNTER_OPS}
FAMILIES = frozenset(FAMILY_OPS)
SNAPSHOT_COLUMNS = list(SnapshotRow.__struct_fields__)
"""One converged key, as ``crdt.fold`` emits it."""

BROADCAST_KEYS = 2_000_000
"""Up to this many keys the per-key summary is broadcast to every task (no shuffle of the ops);
above it, the carriers are found with a shuffle join."""
CARRIERS_PER_PARTITION = 500_000
"""About this many carriers per fold partition (one ``MapStore`` in one Python worker)."""


def is_family(family: str) -> Any:
    return sf.col("op").isin(*FAMILY_OPS[family])


def as_of(ops: DataFrame, seq: int | None) -> DataFrame:
    """The ops committed at or before ``seq`` (all of them when ``seq`` is None)."""
    return ops if seq is None else ops.where(sf.col("seq") <= seq)


FAMILY_BITS = {"lww": 1, "or": 2, "counter": 4}
"""Each family's bit in the ``families`` mask of :func:`key_summary`."""


def family_code() -> Any:
    """The op's family bit, worked out once per row (the aggregates below test the bit)."""
    code = sf.when(is_family("lww"), FAMILY_BITS["lww"])
    for family in ("or", "counter"):
        code = code.when(is_family(family), FAMILY_BITS[family])
    return code.otherwise(0)


def key_summary(ops: DataFrame) -> DataFrame:
    """Per ``(map, key)``: ``ops``, ``other_ops`` (not LWW), ``last_seq``, ``newest`` (the
    greatest LWW ``millis``, null without LWW ops) and ``families`` (a ``FAMILY_BITS`` mask).
    One hash aggregate over narrow columns, the op's family computed once per row."""
    lww = sf.col("code") == FAMILY_BITS["lww"]
    coded = ops.select("map", "key", "seq", "millis", family_code().alias("code"))
    return coded.groupBy("map", "key").agg(
        sf.count("*").alias("ops"),
        sf.count(sf.when(~lww, 1)).alias("other_ops"),
        sf.max("seq").alias("last_seq"),
        sf.max(sf.when(lww, sf.col("millis"))).alias("newest"),
        sf.bit_or("code").alias("families"),
    )


class Totals(NamedTuple):
    ops: int
    keys: int
    other_ops: int
    last_seq: int
    families: frozenset[str]

    def fold_partitions(self, parallelism: int) -> int:
        """Partitions for :func:`fold.fold_carriers`: every core busy, bounded memory each."""
        carriers = self.keys + self.other_ops
        return max(1, parallelism, -(-carriers // CARRIERS_PER_PARTITION))


def totals(summary: DataFrame) -> Totals:
    """Op count, key count, last seq and the families present, from :func:`key_summary`."""
    row = summary.agg(
        sf.sum("ops").alias("ops"),
        sf.count("*").alias("keys"),
        sf.sum("other_ops").alias("other_ops"),
        sf.max("last_seq").alias("last_seq"),
        sf.bit_or("families").alias("families"),
    ).first()
    mask = int(row["families"] or 0)
    present = frozenset(f for f, bit in FAMILY_BITS.items() if mask & bit)
    return Totals(
        int(row["ops"] or 0),
        int(row["keys"]),
        int(row["other_ops"] or 0),
        int(row["last_seq"] or 0),
        present,
    )


def totals_of_table(summary: Any) -> Totals:
    """:func:`totals` of a per-key summary collected to the driver (a ``pyarrow.Table`` with
    the columns of :func:`key_summary`)."""
    import numpy as np

    if summary.num_rows == 0:
        return Totals(0, 0, 0, 0, frozenset())

    def column(name: str) -> Any:
        return summary.column(name).to_numpy(zero_copy_only=False)

    mask = int(np.bitwise_or.reduce(column("families")))
    return Totals(
        int(column("ops").sum()),
        summary.num_rows,
        int(column("other_ops").sum()),
        int(column("last_seq").max()),
        frozenset(f for f, bit in FAMILY_BITS.items() if mask & bit),
    )


IN_PYTHON = "in_python"
"""Column of :func:`carriers`: the key has OR or counter ops, so ``crdt.fold`` folds it in a
Python worker (:mod:`.fold`); other keys are plain LWW, converged in Spark SQL (:mod:`.lww`)."""


def carriers(ops: DataFrame, summary: DataFrame, t: Totals) -> DataFrame:
    """The ops that can carry state: LWW ops at their key's newest millisecond (about one per
    key; the winner is among them) and every op of the other families, plus ``IN_PYTHON``.

    The summary is broadcast when it is small, so the ops are filtered where they are read,
    never shuffled; and the newest millisecond is part of the join key, so an LWW op that
    cannot win finds no partner and is dropped by the join itself. When every op is LWW and
    the summary is broadcast, a semi-join on the set of newest milliseconds first drops the
    ops at a millisecond that is no key's newest (about 97% of them in ``bench/pipeline.py``):
    it only narrows the input of the exact join, so the carriers are the same, and the exact
    join builds its key of two strings for the few ops left instead of for every op."""
    others = sum(bit for family, bit in FAMILY_BITS.items() if family != "lww")
    in_python = (sf.col("families").bitwiseAND(others)) != 0
    newest = summary.select(
        "map", "key", sf.col("newest").alias("millis"), in_python.alias(IN_PYTHON)
    )
    broadcast = t.keys <= BROADCAST_KEYS
    if broadcast:
        newest = sf.broadcast(newest)
    if not t.families - {"lww"}:
        if broadcast:  # a lookup of one long per op, before any map or key string is read
            newest_millis = sf.broadcast(summary.select(sf.col("newest").alias("millis")))
            ops = ops.join(newest_millis, "millis", "left_semi")
        return ops.join(newest, ["map", "key", "millis"]).select(*ops.columns, IN_PYTHON)
    lww = is_family("lww")
    joined = ops.join(newest, ["map", "key", "millis"], "left")
    return joined.where(~lww | sf.col(IN_PYTHON).isNotNull()).select(
        *ops.columns, sf.when(lww, sf.col(IN_PYTHON)).otherwise(True).alias(IN_PYTHON)
    )
