"""Spark compaction == in-process ``crdt.fold``: same rows, same Merkle trees, whatever the
number of input files and shuffle partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.fold import MapStore, fold
from octosync.crdt.op import OpRecord
from octosync.crdt.testing.strategies import op_histories
from octosync.pipeline import transforms as tf
from octosync.pipeline.inputs import read_ops
from octosync.store.export import OPS_SCHEMA

pytestmark = pytest.mark.spark


def write_ops(records: list[OpRecord], out: Path, n_files: int) -> None:
    rows = [
        {
            "seq": i + 1,
            "map": r.map,
            "key": r.key,
            "op": r.op.value,
            "value": r.value,
            "millis": r.ts.millis,
            "counter": r.ts.counter,
            "node": r.ts.node_id,
            "origin": r.origin,
            "op_id": r.op_id,
            "recorded_ms": 0,
        }
        for i, r in enumerate(records)
    ]
    out.mkdir(parents=True)
    for f in range(n_files):
        part = rows[f::n_files]
        pq.write_table(pa.Table.from_pylist(part, schema=OPS_SCHEMA), out / f"part-{f}.parquet")


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
    ops = read_ops(spark, path)
    rows = sorted(
        (tuple(r) for r in tf.compact(ops, gc_horizon_millis=horizon).collect()), key=_order
    )
    trees: dict[str, dict[str, int]] = {}
    for r in tf.merkle_tree(tf.entry_hashes(ops, gc_horizon_millis=horizon)).collect():
        trees.setdefault(r["map"], {})[r["path"]] = r["hash"]
    return rows, trees


@settings(max_examples=8)
@given(op_histories(max_size=30), st.data())
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
    path = tmp_path_factory.mktemp("ops") / "ops"
    write_ops(delivered, path, n_files)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        rows, trees = spark_result(spark, path, horizon)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")

    store = fold(history)  # the in-process fold of the history without duplicates, in order
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
