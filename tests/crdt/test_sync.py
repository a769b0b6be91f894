"""Merkle sync: divergent replicas converge; only differing leaves move; bounded round trips."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import HLC, LWWMap, SyncRequester, SyncResponder, run_sync
from octosync.crdt.sync_messages import (
    BucketPath,
    MerkleReqBucket,
    SyncInit,
    SyncResetRequired,
    SyncRespLeaf,
    SyncRespLeafPayload,
    SyncRespRoot,
    SyncRespRootPayload,
)
from octosync.errors import RemoteProtocolError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


keys = st.text(alphabet="abcdefghij", min_size=1, max_size=3)
writes = st.lists(st.tuples(keys, st.one_of(st.none(), st.integers(0, 9))), max_size=40)


def apply(m: LWWMap, clock: Clock, ws: list[tuple[str, int | None]]) -> None:
    for key, value in ws:
        clock.now += 1
        if value is None:
            m.remove(key)
        else:
            m.set(key, value)


def differing_leaf_records(a: LWWMap, b: LWWMap) -> set[str]:
    """Keys of ``b`` in leaves whose hash differs from ``a``'s, by scanning every leaf."""
    depth = a.merkle.depth
    out: set[str] = set()
    for idx in range(16**depth):
        path = format(idx, f"0{depth}x")
        if a.merkle.node_hash(path) != b.merkle.node_hash(path):
            out |= set(b.merkle.leaf(path))
    return out


@settings(max_examples=40)
@given(writes, writes, writes, st.integers(1, 3))
def test_divergent_replicas_converge_sending_only_differing_leaves(
    common: list[tuple[str, int | None]],
    only_a: list[tuple[str, int | None]],
    only_b: list[tuple[str, int | None]],
    depth: int,
) -> None:
    clock = Clock()
    a, b = LWWMap(HLC("a", clock), depth), LWWMap(HLC("b", clock), depth)
    apply(a, clock, common)
    b.merge_map(a)
    apply(a, clock, only_a)
    apply(b, clock, only_b)

    expected_keys = differing_leaf_records(a, b)
    roots_equal = a.merkle.root() == b.merkle.root()
    pull = SyncRequester("m", a)
    stats = run_sync(pull, SyncResponder("m", b), encode=msgspec.msgpack.encode)
    assert pull.done
    assert stats.round_trips <= depth + 2
    assert stats.records == len(expected_keys)
    assert sorted(pull.received_keys) == sorted(expected_keys)
    if roots_equal:
        assert stats.round_trips == 1
    # and the other way: after both pulls the replicas are equal
    run_sync(SyncRequester("m", b), SyncResponder("m", a))
    assert a.state() == b.state()
    assert a.merkle.root() == b.merkle.root()
    # a third sync finds nothing: one round trip, no records
    again = run_sync(SyncRequester("m", a), SyncResponder("m", b))
    assert (again.round_trips, again.records) == (1, 0)


def test_full_depth_walk_takes_depth_plus_two_round_trips() -> None:
    clock = Clock()
    a, b = LWWMap(HLC("a", clock)), LWWMap(HLC("b", clock))
    b.set("only-here", 1)
    (root,) = SyncResponder("m", b).handle(SyncInit("m"))
    assert isinstance(root, SyncRespRoot)
    assert root.payload.timestamp is not None
    assert root.payload.timestamp.node_id == "b"  # stamped by the source's HLC
    stats = run_sync(SyncRequester("m", a), SyncResponder("m", b))
    assert stats.round_trips == 5
    assert stats.records == 1
    assert a.get("only-here") == 1


def test_reset_required_past_gc_horizon() -> None:
    clock = Clock()
    b = LWWMap(HLC("b", clock))
    b.set("k", 1)
    responder = SyncResponder("m", b, gc_horizon_ms=5_000)
    old = SyncRequester("m", LWWMap(HLC("a", clock)), last_sync_ms=4_999)
    stats = run_sync(old, responder)
    assert stats.reset_required
    assert old.reset_required
    assert old.done
    assert old.target.merkle.root() == 0
    fresh = SyncRequester("m", LWWMap(HLC("c", clock)), last_sync_ms=5_000)
    assert not run_sync(fresh, responder).reset_required
    assert fresh.target.merkle.root() == b.merkle.root()
    (reply,) = responder.handle(SyncInit("m", 1))
    assert isinstance(reply, SyncResetRequired)


def test_protocol_misuse_is_rejected() -> None:
    clock = Clock()
    m = LWWMap(HLC("a", clock))
    responder = SyncResponder("m", m)
    with pytest.raises(RemoteProtocolError):
        responder.handle(SyncInit("other", None))
    requester = SyncRequester("m", m)
    with pytest.raises(RemoteProtocolError):
        requester.receive(SyncRespLeaf(SyncRespLeafPayload("m", "abc", [])))  # never asked
    requester.start()
    unrequested = MerkleReqBucket(BucketPath("m", "abc"))
    with pytest.raises(RemoteProtocolError):
        requester.receive(unrequested)  # a request is not a response
    assert requester.receive(SyncRespRoot(SyncRespRootPayload("m", 0))) == []
    assert requester.done


@settings(max_examples=30)
@given(
    st.lists(st.tuples(keys, st.one_of(st.none(), st.integers(0, 9)), st.booleans()), max_size=40)
)
def test_fold_stores_sync_through_the_session(
    history: list[tuple[str, int | None, bool]],
) -> None:
    """Two op-record stores, each with part of the history, converge via the Merkle walk."""
    from octosync.crdt import MapStore, OpKind, OpRecord, Timestamp
    from octosync.crdt.fold import StoreSyncView

    left, right = MapStore(), MapStore()
    for i, (key, value, to_left) in enumerate(history):
        ts = Timestamp(1_000 + i, 0, "n")
        if value is None:
            rec = OpRecord("m", key, OpKind.REMOVE, b"", ts, "n", str(ts))
        else:
            rec = OpRecord("m", key, OpKind.PUT, msgspec.msgpack.encode(value), ts, "n", str(ts))
        (left if to_left else right).apply(rec)
    lv, rv = StoreSyncView(left, "m"), StoreSyncView(right, "m")
    run_sync(SyncRequester("m", lv), SyncResponder("m", rv))
    run_sync(SyncRequester("m", rv), SyncResponder("m", lv))
    assert left.snapshot_rows() == right.snapshot_rows()
    assert left.merkle_root("m") == right.merkle_root("m")
    # equal to folding the whole history in one store
    whole = MapStore()
    for i, (key, value, _) in enumerate(history):
        ts = Timestamp(1_000 + i, 0, "n")
        raw = b"" if value is None else msgspec.msgpack.encode(value)
        kind = OpKind.REMOVE if value is None else OpKind.PUT
        whole.apply(OpRecord("m", key, kind, raw, ts, "n", str(ts)))
    assert left.snapshot_rows() == whole.snapshot_rows()
