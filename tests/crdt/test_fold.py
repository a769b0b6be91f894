"""The fold: order- and duplicate-free, equal to a naive model, Merkle roots that agree."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import MapStore, OpKind, OpRecord, Timestamp, fold
from octosync.crdt.hashing import lww_item_hash
from octosync.crdt.testing import ReplicaMachine, op_histories, op_records
from octosync.errors import CrdtValueError


def rec(
    op: OpKind, key: str, value: Any, ts: tuple[int, int, str], op_id: str, m: str = "m"
) -> OpRecord:
    raw = b"" if op is OpKind.REMOVE else msgspec.msgpack.encode(value)
    return OpRecord(m, key, op, raw, Timestamp(*ts), ts[2], op_id)


def naive_model(records: list[OpRecord]) -> dict[tuple[str, str], Any]:
    """Decoded expected state by definition, with no incremental bookkeeping."""
    out: dict[tuple[str, str], Any] = {}
    slots = {(r.map, r.key) for r in records}
    for slot in slots:
        mine = {r.op_id: r for r in records if (r.map, r.key) == slot}.values()
        lww = [r for r in mine if r.op in (OpKind.PUT, OpKind.REMOVE)]
        if lww:
            win = max(lww, key=lambda r: (r.ts, r.op_id))
            out[(*slot, "lww")] = (
                msgspec.msgpack.decode(win.value) if win.op is OpKind.PUT else "<gone>"
            )
        adds = [r for r in mine if r.op is OpKind.OR_ADD]
        removes = [r for r in mine if r.op is OpKind.OR_REMOVE]
        if adds or removes:
            dead = {t for r in removes for t in msgspec.msgpack.decode(r.value)}
            out[(*slot, "or")] = sorted(
                (r.op_id, repr(msgspec.msgpack.decode(r.value)))
                for r in adds
                if r.op_id not in dead
            )
        incs = [r for r in mine if r.op is OpKind.INC]
        if incs:
            out[(*slot, "ctr")] = sum(msgspec.msgpack.decode(r.value) for r in incs)
    return out


def observed(store: MapStore, records: list[OpRecord]) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    for m, k in {(r.map, r.key) for r in records}:
        kinds = {r.op for r in records if (r.map, r.key) == (m, k)}
        if kinds & {OpKind.PUT, OpKind.REMOVE}:
            v = store.get(m, k)
            out[(m, k, "lww")] = "<gone>" if v is None else msgspec.msgpack.decode(v)
        if kinds & {OpKind.OR_ADD, OpKind.OR_REMOVE}:
            out[(m, k, "or")] = [
                (t, repr(msgspec.msgpack.decode(v))) for t, v in store.or_values(m, k)
            ]
        if OpKind.INC in kinds:
            out[(m, k, "ctr")] = store.counter(m, k)
    return out


@given(op_histories(), st.randoms(use_true_random=False), st.integers(0, 5))
def test_any_order_with_duplicates_gives_one_state(
    records: list[OpRecord], rnd: Any, dups: int
) -> None:
    reference = fold(records)
    shuffled = list(records) + [records[i % len(records)] for i in range(dups)] if records else []
    rnd.shuffle(shuffled)
    other = fold(shuffled)
    assert other.snapshot_rows() == reference.snapshot_rows()
    for m in ("m1", "m2"):
        assert other.merkle_root(m) == reference.merkle_root(m)
        assert other.merkle_buckets(m) == reference.merkle_buckets(m)
    assert observed(reference, records) == naive_model(records)
    one_by_one = MapStore()
    for r in shuffled:
        one_by_one.apply(r)
    assert one_by_one.snapshot_rows() == reference.snapshot_rows()
    assert one_by_one.merkle_root("m1") == reference.merkle_root("m1")


@given(op_histories(kinds=(OpKind.PUT, OpKind.REMOVE)))
def test_lww_rows_and_merkle_match_topgun_entry_hash(records: list[OpRecord]) -> None:
    store = fold(records)
    for row in store.snapshot_rows():
        live = [r for r in records if (r.map, r.key) == (row.map, row.key)]
        win = max(live, key=lambda r: (r.ts, r.op_id))
        assert (row.millis, row.counter, row.node) == (
            win.ts.millis,
            win.ts.counter,
            win.ts.node_id,
        )
        assert row.tombstone == (win.op is OpKind.REMOVE)
        assert row.value == (None if row.tombstone else win.value)
        tree = store.merkle(row.map)
        leaf = tree.leaf(tree.leaf_path(row.key))
        assert leaf[row.key] == lww_item_hash(row.key, row.millis, row.counter, row.node)


def test_equal_timestamps_tie_break_on_op_id() -> None:
    a = rec(OpKind.PUT, "k", "from-a", (5, 0, "n"), "op-a")
    b = rec(OpKind.PUT, "k", "from-b", (5, 0, "n"), "op-b")
    assert msgspec.msgpack.decode(fold([a, b]).get("m", "k") or b"") == "from-b"
    assert msgspec.msgpack.decode(fold([b, a]).get("m", "k") or b"") == "from-b"


def test_or_add_wins_over_concurrent_remove_and_remove_before_add() -> None:
    add1 = rec(OpKind.OR_ADD, "s", "x", (1, 0, "a"), "t1")
    add2 = rec(OpKind.OR_ADD, "s", "x", (2, 0, "b"), "t2")  # concurrent with the remove
    rm = rec(OpKind.OR_REMOVE, "s", ["t1"], (3, 0, "a"), "r1")
    for order in ([add1, add2, rm], [rm, add2, add1], [add2, rm, add1]):
        store = fold(order)
        assert [t for t, _ in store.or_values("m", "s")] == ["t2"]
        (row,) = store.snapshot_rows()
        assert msgspec.msgpack.decode(row.value or b"") == ["x"]
        assert (row.millis, row.node, row.tombstone) == (3, "a", False)
    gone = fold([rm, add1])
    (row,) = gone.snapshot_rows()
    assert row.tombstone
    assert row.value is None


def test_counter_sums_per_origin() -> None:
    incs = [
        rec(OpKind.INC, "c", 5, (1, 0, "a"), "i1"),
        rec(OpKind.INC, "c", -2, (2, 0, "b"), "i2"),
        rec(OpKind.INC, "c", 3, (3, 0, "a"), "i3"),
    ]
    store = fold(incs + incs[:1])
    assert store.counter("m", "c") == 6
    assert store.counter_state("m", "c") == ({"a": 8}, {"b": 2})
    (row,) = store.snapshot_rows()
    assert msgspec.msgpack.decode(row.value or b"") == 6
    assert (row.millis, row.counter, row.node) == (3, 0, "a")


@pytest.mark.parametrize(
    ("op", "value"),
    [
        (OpKind.INC, b"\xa1x"),
        (OpKind.OR_REMOVE, b"\x01"),
        (OpKind.OR_ADD, b"\xc1"),
        (OpKind.INC, b""),
    ],
)
def test_bad_values_are_rejected_without_change(op: OpKind, value: bytes) -> None:
    store = fold([rec(OpKind.PUT, "k", 1, (1, 0, "a"), "p")])
    before = store.snapshot_rows()
    root = store.merkle_root("m")
    bad = OpRecord("m", "k", op, value, Timestamp(9, 0, "a"), "a", "bad")
    with pytest.raises(CrdtValueError) as info:
        store.apply(bad)
    assert info.value.path == "value"
    assert store.snapshot_rows() == before
    assert store.merkle_root("m") == root


Replica = tuple[MapStore, list[OpRecord]]


class StoreMachine(ReplicaMachine[Replica]):
    """Replicas are stores plus the records they hold; a merge ships the source's records."""

    def new_replica(self, index: int) -> Replica:
        return MapStore(), []

    def local_update(self, replica: Replica, index: int, data: st.DataObject) -> None:
        store, log = replica
        tags = tuple(r.op_id for r in log if r.op is OpKind.OR_ADD)
        r = data.draw(op_records(f"r{index}-{len(log)}-{self.steps}", earlier_tags=tags))
        store.apply(r)
        log.append(r)

    def merge_into(self, target: Replica, source: Replica) -> None:
        known = {r.op_id for r in target[1]}
        for r in list(source[1]):
            target[0].apply(r)
            if r.op_id not in known:
                target[1].append(r)

    def observe(self, replica: Replica) -> Any:
        store = replica[0]
        return (store.snapshot_rows(), store.merkle_root("m1"), store.merkle_root("m2"))

    def dominates(self, after: Replica, before_value: Any) -> bool:
        # per key, the newest timestamp after the merge is at least the newest one before
        def newest(rows: list[Any]) -> dict[tuple[str, str], tuple[int, int, str]]:
            out: dict[tuple[str, str], tuple[int, int, str]] = {}
            for r in rows:
                ts = (r.millis, r.counter, r.node)
                out[(r.map, r.key)] = max(out.get((r.map, r.key), ts), ts)
            return out

        now, then = newest(after[0].snapshot_rows()), newest(before_value[0])
        return all(slot in now and now[slot] >= ts for slot, ts in then.items())


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=25, stateful_step_count=30)


@given(op_histories(kinds=(OpKind.PUT, OpKind.REMOVE)), st.integers(0, 8))
def test_lww_snapshot_load_then_tail_equals_full_fold(records: list[OpRecord], cut: int) -> None:
    # Rows carry no op id, so loading is exact when timestamps are unique (as HLCs make them).
    unique: dict[Timestamp, OpRecord] = {}
    for r in records:
        unique.setdefault(r.ts, r)
    records = list(unique.values())
    head, tail = records[: len(records) * cut // 8], records[len(records) * cut // 8 :]
    loaded = MapStore()
    loaded.load_lww_rows(fold(head).snapshot_rows())
    loaded.apply_all(tail)
    full = fold(records)
    assert loaded.snapshot_rows() == full.snapshot_rows()
    for m in ("m1", "m2"):
        assert loaded.merkle_root(m) == full.merkle_root(m)


@given(op_histories(kinds=(OpKind.PUT, OpKind.REMOVE, OpKind.OR_ADD, OpKind.OR_REMOVE)))
def test_gc_drops_only_old_tombstones(records: list[OpRecord]) -> None:
    store = fold(records)
    before = store.snapshot_rows()
    dropped = store.gc(horizon_ms=4)
    after = store.snapshot_rows()
    assert [r for r in before if not (r.tombstone and r.millis < 4)] == after
    assert dropped == len(before) - len(after)
    # the Merkle tree equals a store without the history of the dropped (key, family) pairs
    lww_kinds = (OpKind.PUT, OpKind.REMOVE)

    def old_tombstones(family: list[OpRecord]) -> set[tuple[str, str]]:
        return {
            (r.map, r.key) for r in fold(family).snapshot_rows() if r.tombstone and r.millis < 4
        }

    lww = [r for r in records if r.op in lww_kinds]
    orm = [r for r in records if r.op not in lww_kinds]
    dead_lww, dead_or = old_tombstones(lww), old_tombstones(orm)
    rebuilt = fold(
        [r for r in lww if (r.map, r.key) not in dead_lww]
        + [r for r in orm if (r.map, r.key) not in dead_or]
    )
    for m in ("m1", "m2"):
        assert store.merkle_root(m) == rebuilt.merkle_root(m)


@given(op_histories(kinds=(OpKind.PUT, OpKind.REMOVE)), st.integers(0, 25))
def test_apply_lww_many_is_apply_lww_one_by_one(records: list[OpRecord], cut: int) -> None:
    one, many = MapStore(), MapStore()
    head, tail = records[:cut], records[cut:] + records[:cut]  # replays are no change
    for batch in (head, tail):
        flags = [one.apply_lww(r) for r in batch]
        assert many.apply_lww_many(batch) == flags
    assert many.snapshot_rows() == one.snapshot_rows()
    assert many.merkle("m1").root() == one.merkle("m1").root()


def test_op_records_are_not_tracked_by_the_cycle_collector() -> None:
    import gc

    record = rec(OpKind.PUT, "k", 1, (1, 1, "n"), "op-1")
    assert not gc.is_tracked(record)
    assert not gc.is_tracked(record.ts)


@given(op_histories())
def test_a_map_s_records_fold_to_its_state_and_dropping_it_leaves_the_others(
    records: list[OpRecord],
) -> None:
    """What a node that loads a map folds (``records_of``: its snapshot) gives the same state
    and Merkle root; a node letting one map go keeps every other as it was."""
    store = fold(records)
    names = store.maps()
    for name in names:
        mine = [r for r in records if r.map == name]
        loaded = fold(store.records_of(name))
        assert observed(loaded, mine) == observed(store, mine)
        assert loaded.merkle_root(name) == store.merkle_root(name)
        assert list(loaded.rows()) == list(store.rows(name))
    if names:
        gone = names[0]
        before = {n: (list(store.rows(n)), store.merkle_root(n)) for n in names[1:]}
        assert store.drop(gone) == len(
            fold([r for r in records if r.map == gone]).merkle(gone).items()
        )
        assert list(store.rows(gone)) == []
        assert store.records_of(gone) == []
        assert gone not in store.maps()
        assert {n: (list(store.rows(n)), store.merkle_root(n)) for n in names[1:]} == before
