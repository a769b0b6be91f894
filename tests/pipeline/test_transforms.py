from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from pyspark.testing import assertDataFrameEqual

from octosync.pipeline import transforms as tf
from tests.pipeline.helpers import fmix32, fnv1a32_utf16, op_row, ops_df, reference_tree

pytestmark = pytest.mark.spark

SNAP = (
    "map string, key string, value binary, millis long, counter int, node string, tombstone boolean"
)


def snap(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, SNAP)


def test_fnv1a_and_fmix32_match_known_values_and_the_reference(spark: Any) -> None:
    words = ["", "a", "foobar", "key:1:2:node", "héllo", "𝄞 clef", "日本" * 40]
    for batch in (words, [w for w in words if w.isascii()]):  # both code paths
        df = spark.createDataFrame([(w,) for w in batch], "w string")
        out = tf.with_fmix32(tf.with_fnv1a32(df, "w", "h"), "h", "m")
        got = {r["w"]: (r["h"], r["m"]) for r in out.collect()}
        assert got[""][0] == 0x811C9DC5  # FNV-1a offset basis
        assert got["a"][0] == 0xE40C292C  # published FNV-1a-32 test vectors
        assert got["foobar"][0] == 0xBF9CF968
        for w in batch:
            assert got[w] == (fnv1a32_utf16(w), fmix32(fnv1a32_utf16(w)))


def test_vectorised_hashes_without_spark() -> None:
    import pyarrow as pa

    words = ["", "k", "key:1767225600000:3:node-1", "ключ", "😀", "a" * 300]
    sliced = pa.array(["skip", *words])[1:]  # a sliced array has an offset into its buffers
    for arr in (pa.array(words), sliced, pa.array([w for w in words if w.isascii()])):
        assert list(tf.fnv1a32_array(arr)) == [fnv1a32_utf16(w) for w in arr.to_pylist()]
    values = np.array([0, 1, 2**31, 2**32 - 1, 0xDEADBEEF], dtype=np.uint64)
    assert list(tf.fmix32_array(values)) == [fmix32(int(v)) for v in values]


def test_fmix32_stays_exact_at_the_32_bit_edges(spark: Any) -> None:
    values = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 0x85EBCA6B, 0xDEADBEEF]
    df = spark.createDataFrame([(v,) for v in values], "v long")
    got = [r["m"] for r in tf.with_fmix32(df, "v", "m").collect()]
    assert got == [fmix32(v) for v in values]


def test_lww_picks_the_hlc_greatest_and_removes_leave_tombstones(spark: Any) -> None:
    rows = [
        op_row(1, "m", "a", "PUT", 1, 10, 0, "n1", "n1:1"),
        op_row(2, "m", "a", "PUT", 2, 10, 1, "n0", "n0:1"),  # counter beats node
        op_row(3, "m", "a", "PUT", 2, 10, 1, "n0", "n0:1"),  # duplicate delivery
        op_row(4, "m", "b", "PUT", 3, 20, 0, "n0", "n0:2"),
        op_row(5, "m", "b", "REMOVE", b"", 20, 0, "n1", "n1:2"),  # node n1 > n0 at equal time
        op_row(6, "m", "c", "PUT", 4, 30, 0, "zz", "zz:1"),
        op_row(7, "m", "c", "PUT", 5, 30, 0, "zz", "zz:2"),  # same HLC: op id decides
        op_row(8, "other", "a", "PUT", 6, 1, 0, "n", "n:1"),
        op_row(9, "m", "d", "INC", 7, 99, 0, "n", "n:9"),  # not an LWW op
    ]
    expected = snap(
        spark,
        [
            ("m", "a", msgspec.msgpack.encode(2), 10, 1, "n0", False),
            ("m", "b", None, 20, 0, "n1", True),
            ("m", "c", msgspec.msgpack.encode(5), 30, 0, "zz", False),
            ("other", "a", msgspec.msgpack.encode(6), 1, 0, "n", False),
        ],
    )
    assertDataFrameEqual(tf.lww_state(ops_df(spark, rows)), expected)


def test_node_ids_compare_as_utf8_bytes(spark: Any) -> None:
    rows = [
        op_row(1, "m", "k", "PUT", 1, 5, 0, "\uff5a", "x:1"),  # U+FF5A, 3 UTF-8 bytes
        op_row(2, "m", "k", "PUT", 2, 5, 0, "\U0001f600", "y:1"),  # 4 bytes, starts 0xF0: greater
    ]
    got = tf.lww_state(ops_df(spark, rows)).collect()
    assert [r["node"] for r in got] == ["\U0001f600"]


def test_or_map_is_observed_remove_add_wins(spark: Any) -> None:
    rows = [
        op_row(1, "t", "k", "OR_ADD", "x", 10, 0, "a", "a:1"),
        op_row(2, "t", "k", "OR_ADD", "y", 11, 0, "b", "b:1"),
        op_row(3, "t", "k", "OR_REMOVE", ["a:1"], 12, 0, "a", "a:2"),
        op_row(4, "t", "k", "OR_ADD", "x", 9, 0, "c", "c:1"),  # concurrent add not observed: wins
        op_row(5, "t", "gone", "OR_ADD", "z", 1, 0, "a", "a:3"),
        op_row(6, "t", "gone", "OR_REMOVE", ["a:3", "never"], 2, 0, "b", "b:2"),
        op_row(7, "t", "gone", "OR_REMOVE", ["a:3", "never"], 2, 0, "b", "b:2"),  # duplicate
    ]
    expected = snap(
        spark,
        [
            ("t", "k", msgspec.msgpack.encode(["y", "x"]), 12, 0, "a", False),  # by tag b:1, c:1
            ("t", "gone", None, 2, 0, "b", True),
        ],
    )
    assertDataFrameEqual(tf.or_map_state(ops_df(spark, rows)), expected)


def test_pn_counter_sums_each_op_once(spark: Any) -> None:
    rows = [
        op_row(1, "c", "k", "INC", 5, 1, 0, "a", "a:1"),
        op_row(2, "c", "k", "INC", 5, 1, 0, "a", "a:1"),  # duplicate
        op_row(3, "c", "k", "INC", -2, 3, 0, "b", "b:1"),
        op_row(4, "c", "k", "INC", 2**40, 2, 0, "a", "a:2"),
        op_row(5, "c", "z", "INC", -7, 1, 0, "a", "a:3"),
    ]
    expected = snap(
        spark,
        [
            ("c", "k", msgspec.msgpack.encode(3 + 2**40), 3, 0, "b", False),
            ("c", "z", msgspec.msgpack.encode(-7), 1, 0, "a", False),
        ],
    )
    assertDataFrameEqual(tf.counter_state(ops_df(spark, rows)), expected)


def test_a_value_that_is_not_msgpack_names_the_op(spark: Any) -> None:
    rows = [op_row(1, "c", "k", "INC", b"\xc1", 1, 0, "a", "a:bad")]
    with pytest.raises(Exception, match="a:bad"):
        tf.counter_state(ops_df(spark, rows)).collect()


def test_gc_horizon_drops_only_old_tombstones(spark: Any) -> None:
    df = snap(
        spark,
        [
            ("m", "old", b"", 5, 0, "n", True),
            ("m", "new", b"", 50, 0, "n", True),
            ("m", "v", b"\x01", 1, 0, "n", False),
        ],
    )
    assertDataFrameEqual(tf.drop_tombstones_before(df, 10), df.where("key != 'old'"))
    assertDataFrameEqual(tf.drop_tombstones_before(df, None), df)


def test_as_of_keeps_ops_up_to_the_seq(spark: Any) -> None:
    rows = [op_row(i, "m", "k", "PUT", i, i, 0, "n", f"n:{i}") for i in range(1, 6)]
    assert [r["seq"] for r in tf.as_of(ops_df(spark, rows), 3).collect()] == [1, 2, 3]


def test_merkle_tree_matches_the_reference_and_the_crdt_tree(spark: Any) -> None:
    from octosync.crdt.merkle import MerkleTree

    entries = [(f"key{i}", fnv1a32_utf16(f"v{i}")) for i in range(300)] + [
        ("", 7),
        ("é", 2**32 - 1),
    ]
    df = spark.createDataFrame(
        [("m", k, e) for k, e in entries], "map string, key string, entry long"
    )
    tree = {r["path"]: r["hash"] for r in tf.merkle_tree(df).collect()}
    assert tree == reference_tree(entries)
    crdt_tree = MerkleTree.from_items(entries)
    assert all(crdt_tree.node_hash(path) == h for path, h in tree.items())
    roots = tf.merkle_roots(tf.merkle_tree(df)).collect()
    assert [(r["map"], r["root"]) for r in roots] == [("m", crdt_tree.root())]


def test_entry_hashes_follow_each_op_family(spark: Any) -> None:
    rows = [
        op_row(1, "m", "a", "PUT", 1, 10, 2, "n1", "n1:1"),
        op_row(2, "m", "a", "PUT", 1, 9, 0, "n1", "n1:0"),
        op_row(3, "t", "b", "OR_ADD", "x", 1, 0, "n", "n:1"),
        op_row(4, "t", "b", "OR_REMOVE", ["n:1"], 2, 0, "n", "n:2"),
        op_row(5, "t", "b", "OR_REMOVE", ["n:1"], 2, 0, "n", "n:2"),  # duplicate: counted once
        op_row(6, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
    ]
    got = {(r["map"], r["key"]): r["entry"] for r in tf.entry_hashes(ops_df(spark, rows)).collect()}
    set_b = (fmix32(fnv1a32_utf16("b:n:1")) + fmix32(fnv1a32_utf16("b:n:2"))) % 2**32
    assert got == {
        ("m", "a"): fnv1a32_utf16("a:10:2:n1"),
        ("t", "b"): set_b,
        ("c", "z"): fmix32(fnv1a32_utf16("z:n:3")),
    }


def test_state_records_keep_lww_winners_and_every_distinct_other_op(spark: Any) -> None:
    rows = [
        op_row(1, "m", "a", "PUT", 1, 10, 0, "n", "n:1"),
        op_row(2, "m", "a", "PUT", 2, 11, 0, "n", "n:2"),
        op_row(3, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
        op_row(4, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
        op_row(5, "t", "b", "OR_ADD", "x", 1, 0, "n", "n:4"),
    ]
    got = sorted(r["op_id"] for r in tf.state_records(ops_df(spark, rows)).collect())
    assert got == ["n:2", "n:3", "n:4"]
