"""Plain-LWW keys converged in Spark SQL: the winners, tombstones, GC and Merkle leaves equal
``crdt.fold``'s, and the distributed and driver-side leaf sums agree."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.fold import fold
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.testing.strategies import op_histories
from octosync.pipeline.transforms import lww
from octosync.store.op_table import OPS_SCHEMA, op_row

pytestmark = pytest.mark.spark

LWW_ONLY = (OpKind.PUT, OpKind.REMOVE)


def ops_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(
        [tuple(r[n] for n in OPS_SCHEMA.names) for r in rows], from_arrow_schema(OPS_SCHEMA)
    )


@settings(max_examples=6, deadline=None)
@given(op_histories(max_size=25, kinds=LWW_ONLY), st.data())
def test_winners_snapshot_and_leaves_equal_the_fold(
    spark: Any, history: list[OpRecord], data: st.DataObject
) -> None:
    again = data.draw(st.lists(st.sampled_from(history), max_size=5)) if history else []
    delivered = data.draw(st.permutations(history + again))
    rows = [op_row(rec, seq) for seq, rec in enumerate(delivered, start=1)]
    horizon = data.draw(st.none() | st.integers(0, 7), label="GC horizon")
    wins = lww.winners(ops_df(spark, rows)).cache()
    live = lww.surviving(wins, horizon)

    store = fold(history)
    latest = {r["op_id"]: r["seq"] for r in rows}  # the last delivery of each record
    got = sorted((r["map"], r["key"], r["op_id"], r["seq"]) for r in wins.collect())
    assert got == sorted(
        (m, k, w.op_id, latest[w.op_id])
        for m, k in {(r.map, r.key) for r in store.snapshot_rows()}
        if (w := store.lww_winner(m, k)) is not None
    )
    if horizon is not None:
        store.gc(horizon)
    snapshot = sorted(tuple(r) for r in lww.snapshot(live).collect())
    assert snapshot == sorted(
        tuple(getattr(r, f) for f in r.__struct_fields__) for r in store.snapshot_rows()
    )

    won = wins.toArrow()  # the same outputs built on the driver from the collected winners
    live_won = lww.surviving_table(won, horizon)
    assert sorted(tuple(r.values()) for r in lww.snapshot_table(live_won).to_pylist()) == snapshot
    records = sorted(tuple(r.values()) for r in lww.records_table(won).to_pylist())
    assert records == sorted(tuple(r) for r in wins.select(*OPS_SCHEMA.names).collect())

    expected = {
        (m, leaf): h for m in store.maps() for leaf, h in store.merkle(m).leaf_hashes().items()
    }
    spread: dict[tuple[str, int], int] = {}
    for r in lww.leaves(live.repartition(3)).collect():  # partial sums from several partitions
        spread[(r["map"], r["leaf"])] = (spread.get((r["map"], r["leaf"]), 0) + r["hash"]) % 2**32
    assert {k: h for k, h in spread.items() if h} == expected
    table = live.select(*lww.LEAF_INPUT).toArrow()
    on_driver = pa.Table.from_batches(list(lww.leaf_sums(table.to_batches())), lww.LEAF_SCHEMA)
    rows_driver = zip(
        *(on_driver.column(c).to_pylist() for c in ("map", "leaf", "hash")), strict=True
    )
    assert {(m, leaf): h for m, leaf, h in rows_driver if h} == expected
    wins.unpersist()
