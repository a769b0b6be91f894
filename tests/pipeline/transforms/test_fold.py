"""The carriers folded per partition: the CRDT rules of ``crdt.fold``, reached through Spark."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.pipeline.helpers import fmix32, fnv1a32_utf16, op_row, ops_df

from octosync.crdt.fold import fold
from octosync.pipeline.transforms.fold import (
    Folder,
    fold_carriers,
    leaves_of,
    records_of,
    snapshot_of,
)
from octosync.pipeline.transforms.merkle import merkle_roots, tree_table
from octosync.pipeline.transforms.ops import carriers, key_summary, totals
from octosync.store.op_table import op_table
from octosync.store.synthetic import generate_records

pytestmark = pytest.mark.spark


def folded(spark: Any, rows: list[dict[str, Any]], gc: int | None = None) -> Any:
    ops = ops_df(spark, rows)
    summary = key_summary(ops)
    return fold_carriers(carriers(ops, summary, totals(summary)), 2, gc_horizon_millis=gc)


def snapshot(spark: Any, rows: list[dict[str, Any]], gc: int | None = None) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in snapshot_of(folded(spark, rows, gc)).collect()}


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
        op_row(9, "u", "k", "PUT", 1, 5, 0, "\uff5a", "x:1"),  # U+FF5A, 3 UTF-8 bytes
        op_row(10, "u", "k", "PUT", 2, 5, 0, "\U0001f600", "y:1"),  # starts 0xF0: greater
    ]
    assert snapshot(spark, rows) == {
        ("m", "a", msgspec.msgpack.encode(2), 10, 1, "n0", False),
        ("m", "b", None, 20, 0, "n1", True),
        ("m", "c", msgspec.msgpack.encode(5), 30, 0, "zz", False),
        ("other", "a", msgspec.msgpack.encode(6), 1, 0, "n", False),
        ("u", "k", msgspec.msgpack.encode(2), 5, 0, "\U0001f600", False),
    }


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
    assert snapshot(spark, rows) == {
        ("t", "k", msgspec.msgpack.encode(["y", "x"]), 12, 0, "a", False),  # by tag b:1, c:1
        ("t", "gone", None, 2, 0, "b", True),
    }
    assert snapshot(spark, rows, gc=2) == snapshot(spark, rows)  # kept: not older than 2
    assert snapshot(spark, rows, gc=3) == {  # the old OR tombstone is collected
        ("t", "k", msgspec.msgpack.encode(["y", "x"]), 12, 0, "a", False)
    }


def test_pn_counter_sums_each_op_once(spark: Any) -> None:
    rows = [
        op_row(1, "c", "k", "INC", 5, 1, 0, "a", "a:1"),
        op_row(2, "c", "k", "INC", 5, 1, 0, "a", "a:1"),  # duplicate
        op_row(3, "c", "k", "INC", -2, 3, 0, "b", "b:1"),
        op_row(4, "c", "k", "INC", 2**40, 2, 0, "a", "a:2"),
        op_row(5, "c", "z", "INC", -7, 1, 0, "a", "a:3"),
    ]
    assert snapshot(spark, rows) == {
        ("c", "k", msgspec.msgpack.encode(3 + 2**40), 3, 0, "b", False),
        ("c", "z", msgspec.msgpack.encode(-7), 1, 0, "a", False),
    }


def test_a_value_that_is_not_msgpack_names_the_op(spark: Any) -> None:
    rows = [op_row(1, "c", "k", "INC", b"\xc1", 1, 0, "a", "a:bad")]
    with pytest.raises(Exception, match="a:bad"):
        snapshot(spark, rows)


def test_records_keep_lww_winners_and_every_distinct_other_op(spark: Any) -> None:
    rows = [
        op_row(1, "m", "a", "PUT", 1, 10, 0, "n", "n:1"),
        op_row(2, "m", "a", "PUT", 2, 11, 0, "n", "n:2"),
        op_row(3, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
        op_row(4, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
        op_row(5, "t", "b", "OR_ADD", "x", 1, 0, "n", "n:4"),
        op_row(6, "m", "a", "PUT", 2, 11, 0, "n", "n:2"),
    ]
    got = sorted((r["op_id"], r["seq"]) for r in records_of(folded(spark, rows)).collect())
    assert got == [("n:2", 6), ("n:3", 4), ("n:4", 5)]  # each record at its latest delivery


def test_leaf_hashes_follow_each_op_family(spark: Any) -> None:
    rows = [
        op_row(1, "m", "a", "PUT", 1, 10, 2, "n1", "n1:1"),
        op_row(2, "m", "a", "PUT", 1, 9, 0, "n1", "n1:0"),
        op_row(3, "t", "b", "OR_ADD", "x", 1, 0, "n", "n:1"),
        op_row(4, "t", "b", "OR_REMOVE", ["n:1"], 2, 0, "n", "n:2"),
        op_row(5, "t", "b", "OR_REMOVE", ["n:1"], 2, 0, "n", "n:2"),  # duplicate: counted once
        op_row(6, "c", "z", "INC", 3, 1, 0, "n", "n:3"),
        op_row(7, "c", "z", "PUT", 3, 1, 0, "n", "n:4"),  # a second family on one key: summed
    ]
    got = {(r["map"], r["leaf"]): r["hash"] for r in leaves_of(folded(spark, rows)).collect()}
    set_b = (fmix32(fnv1a32_utf16("b:n:1")) + fmix32(fnv1a32_utf16("b:n:2"))) % 2**32
    z = (fmix32(fnv1a32_utf16("z:n:3")) + fnv1a32_utf16("z:1:0:n")) % 2**32
    assert got == {
        ("m", fnv1a32_utf16("a") >> 20): fmix32(fnv1a32_utf16("a:10:2:n1")),
        ("t", fnv1a32_utf16("b") >> 20): fmix32(set_b),
        ("c", fnv1a32_utf16("z") >> 20): fmix32(z),
    }


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 400),
    seed=st.integers(0, 2**16),
    cuts=st.lists(st.integers(0, 400), max_size=5),
)
def test_a_folder_fed_in_batches_gives_the_fold_of_everything(
    n: int, seed: int, cuts: list[int]
) -> None:
    """What the stream's driver keeps between micro-batches: after every batch its tables
    (built from the last ones plus the keys touched) equal ``crdt.fold`` of every op so far."""
    records = generate_records(n, seed=seed, n_keys=max(3, n // 8))
    table = op_table(records)
    folder = Folder()
    bounds = [0, *sorted({min(c, n) for c in cuts}), n]
    for lo, hi in itertools.pairwise(bounds):
        if lo == hi:
            continue
        for batch in table.slice(lo, hi - lo).to_batches():
            folder.add(batch)
        snap, recs, leaves = folder.tables()
        store = fold(records[:hi])
        assert sorted(tuple(r.values()) for r in snap.to_pylist()) == sorted(
            tuple(getattr(r, f) for f in r.__struct_fields__) for r in store.snapshot_rows()
        )
        roots = merkle_roots(tree_table(leaves))
        assert roots == {m: store.merkle_root(m) for m in store.maps()}
        held = {(r["map"], r["key"], r["op_id"]) for r in recs.to_pylist()}
        assert held == {
            (m, k, rec.op_id)
            for m in store.maps()
            for k in {r.key for r in records[:hi] if r.map == m}
            for rec in store.records_for(m, k)
        }
        assert recs.num_rows == len(held)  # each record once
