"""The compact job == in-process ``crdt.fold``: same rows, same Merkle trees, whatever the
number of input files, shuffle partitions, duplicate deliveries and GC horizon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.fold import MapStore, fold
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.testing.strategies import op_histories
from octosync.pipeline.jobs import compact
from octosync.pipeline.layout import MERKLE_DIR, RECORDS_DIR, SNAPSHOT_DIR
from octosync.pipeline.transforms import lww
from octosync.store.op_table import op_table

pytestmark = pytest.mark.spark


def write_ops(records: list[OpRecord], out: Path, n_files: int) -> None:
    table = op_table(records)
    out.mkdir(parents=True)
    for f in range(n_files):
        rows = pa.array(range(f, len(records), n_files), pa.int64())
        pq.write_table(table.take(rows), out / f"part-{f}.parquet")


def crdt_nodes(store: MapStore, map_name: str) -> dict[str, int]:
    tree = store.merkle(map_name)
    nodes = {"": tree.root()} if tree.root() else {}
    frontier = [""]
    for _ in range(tree.depth):
        nxt = []
        for path in frontier:
            for digit, h in tree.buckets(path).items():
                nodes[path + digit] = h
                nxt.append(path + digit)
        frontier = nxt
    return nodes


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v if v is not None else 0) for v in row)


def spark_result(
    spark: Any, path: Path, horizon: int | None
) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, int]]]:
    """What ``octosync pipeline compact`` writes for the ops at ``path``."""
    out = path.parent / "compacted"
    compact.run(spark, path, out, gc_horizon_millis=horizon)
    snapshot = spark.read.parquet(str(out / SNAPSHOT_DIR)).collect()
    rows = sorted((tuple(r) for r in snapshot), key=_order)
    trees: dict[str, dict[str, int]] = {}
    for r in pq.read_table(out / MERKLE_DIR).to_pylist():
        trees.setdefault(r["map"], {})[r["path"]] = r["hash"]
    return rows, trees


LWW_ONLY = (OpKind.PUT, OpKind.REMOVE)


@settings(max_examples=10)
@given(op_histories(max_size=30) | op_histories(max_size=30, kinds=LWW_ONLY), st.data())
def test_spark_compaction_equals_the_in_process_fold(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    history: list[OpRecord],
    data: st.DataObject,
) -> None:
    duplicates = data.draw(st.lists(st.sampled_from(history), max_size=6)) if history else []
    delivered = data.draw(st.permutations(history + duplicates))
    n_files = data.draw(st.integers(1, 4), label="files")
    partitions = data.draw(st.integers(1, 6), label="shuffle partitions")
    horizon = data.draw(st.none() | st.integers(0, 7), label="tombstone GC horizon")
    one_pass = data.draw(st.booleans(), label="one-pass plan for a small input")
    path = tmp_path_factory.mktemp("ops") / "ops"
    write_ops(delivered, path, n_files)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    default_one_pass = lww.ONE_PASS_OPS
    lww.ONE_PASS_OPS = default_one_pass if one_pass else 0
    try:
        rows, trees = spark_result(spark, path, horizon)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        lww.ONE_PASS_OPS = default_one_pass

    store = fold(history)  # the in-process fold of the history without duplicates, in order
    slots = {(r.map, r.key) for r in store.snapshot_rows()}
    carried = {(m, k, rec.op_id) for m, k in slots for rec in store.records_for(m, k)}
    written = pq.read_table(path.parent / "compacted" / RECORDS_DIR).to_pylist()
    assert sorted((r["map"], r["key"], r["op_id"]) for r in written) == sorted(carried)
    if horizon is not None:
        store.gc(horizon)
    expected_rows = sorted(
        (tuple(getattr(r, f) for f in r.__struct_fields__) for r in store.snapshot_rows()),
        key=_order,
    )
    assert rows == expected_rows
    assert set(trees) == {m for m in store.maps() if store.merkle_root(m) != 0}
    for m in store.maps():
        assert trees.get(m, {}) == crdt_nodes(store, m)
