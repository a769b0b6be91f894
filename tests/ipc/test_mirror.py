"""Mirror: snapshot + gapless deltas, redelivery, gaps, resync, hashes, bad ops."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.errors import RemoteProtocolError, SnapshotRequired, TypeTagError
from octosync.graph.type_tags import TypeRegistry, default_registry
from octosync.ipc.messages import (
    BlobRef,
    CellSet,
    Delta,
    DeltaOp,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    ResyncRequest,
    SlotValue,
    Snapshot,
)
from octosync.ipc.mirror import Applied, Ignored, Mirror
from octosync.ipc.state_hash import state_hash
from tests.strategies import node_snapshots

I64 = default_registry.get("i64")


def i64(value: int) -> bytes:
    return I64.encode(value)


def base_snapshot(epoch: int = 5) -> Snapshot:
    return Snapshot(
        epoch=epoch,
        nodes=(
            NodeSnapshot(1, "i64", "resolved", i64(10)),
            NodeSnapshot(2, "i64", "resolved", i64(20)),
            NodeSnapshot(3, "string", "dirty"),
        ),
        edges=(Edge(2, 1), Edge(3, 2)),
        roots=(1,),
    )


def synced(epoch: int = 5) -> Mirror:
    m = Mirror()
    assert m.apply(base_snapshot(epoch)) == Applied(epoch)
    return m


def test_snapshot_then_deltas_mirror_values() -> None:
    m = synced()
    assert m.values() == {1: 10, 2: 20}
    assert m.apply(Delta(5, 6, (CellSet(1, i64(11)), SlotValue(2, i64(22))))) == Applied(6)
    assert m.apply(Delta(6, 7, (SlotValue(3, b"hi"),))) == Applied(7)
    assert m.values() == {1: 11, 2: 22, 3: "hi"}
    assert m.last_epoch == 7
    assert m.in_sync


def test_invalidate_marks_dirty_and_drops_the_value() -> None:
    m = synced()
    assert m.apply(Delta(5, 6, (Invalidate(2),))) == Applied(6)
    assert m.values() == {1: 10}
    assert {n.slot_id: n.state for n in m.nodes} == {1: "resolved", 2: "dirty", 3: "dirty"}


def test_redelivered_delta_is_ignored_and_changes_nothing() -> None:
    m = synced()
    d = Delta(5, 6, (CellSet(1, i64(11)),))
    assert m.apply(d) == Applied(6)
    assert m.apply(Delta(6, 7, (CellSet(1, i64(12)),))) == Applied(7)
    before = m.nodes
    assert m.apply(d) == Ignored(7, "already_applied")
    assert m.nodes == before
    assert m.values()[1] == 12
    assert m.last_epoch == 7
    assert m.in_sync


def test_gap_discards_delta_then_snapshot_resumes() -> None:
    m = synced()
    result = m.apply(Delta(7, 8, (CellSet(1, i64(99)),)))
    assert result == ResyncRequest(last_epoch=5, reason="EpochGap")
    assert not m.in_sync
    assert m.values()[1] == 10
    # Further deltas wait for the snapshot: one request per gap.
    assert m.apply(Delta(8, 9, ())) == Ignored(5, "awaiting_snapshot")
    assert m.resync_request() == ResyncRequest(last_epoch=5, reason="EpochGap")
    assert m.apply(base_snapshot(9)) == Applied(9)
    assert m.in_sync
    assert m.apply(Delta(9, 10, (CellSet(1, i64(1)),))) == Applied(10)
    assert m.values()[1] == 1


def test_delta_before_any_snapshot_requests_one() -> None:
    m = Mirror()
    assert m.apply(Delta(0, 1, ())) == ResyncRequest(last_epoch=None, reason="SnapshotRequired")
    assert not m.in_sync
    assert m.last_epoch is None
    assert m.apply(base_snapshot(1)) == Applied(1)
    assert m.in_sync


@pytest.mark.parametrize(
    ("bad_op", "index"),
    [
        (CellSet(42, i64(1)), 1),
        (Invalidate(42), 1),
        (NodeRemove(42), 1),
        (NodeAdd(2, "i64", i64(0)), 1),
        (NodeAdd(9, "i64"), None),  # unset node: fine
        (NodeAdd(9, "i64", None, None, "resolved"), 1),
        (NodeAdd(9, "i64", i64(1), None, "dirty"), 1),
        (EdgeAdd(1, 42), 1),
    ],
)
def test_bad_op_rolls_back_the_whole_delta(bad_op: DeltaOp, index: int | None) -> None:
    m = synced()
    nodes, edges, roots = m.nodes, m.edges, m.roots
    ops = (
        CellSet(1, i64(11)),
        bad_op,
        NodeRemove(2),
        NodeAdd(7, "i64", i64(7), "k/7"),
        EdgeAdd(7, 1),
        EdgeRemove(3, 2),
    )
    result = m.apply(Delta(5, 6, ops))
    if index is None:
        assert result == Applied(6)
        return
    assert isinstance(result, ResyncRequest)
    assert result.last_epoch == 5
    assert m.last_error is not None
    assert m.last_error.path == f"ops[{index}]"
    assert (m.nodes, m.edges, m.roots) == (nodes, edges, roots)
    assert m.last_epoch == 5
    assert not m.in_sync


def test_rollback_restores_cascaded_edges_roots_and_keys() -> None:
    m = Mirror()
    snap = Snapshot(
        3,
        (
            NodeSnapshot(1, "i64", "resolved", i64(1), "cells/a"),
            NodeSnapshot(2, "i64", "unset"),
        ),
        (Edge(2, 1),),
        (1,),
    )
    m.apply(snap)
    ops = (NodeRemove(1), NodeAdd(1, "string", b"x"), CellSet(5, b""))
    assert isinstance(m.apply(Delta(3, 4, ops)), ResyncRequest)
    assert m.snapshot() == snap


def test_node_remove_drops_its_edges_and_root() -> None:
    m = synced()
    assert m.apply(Delta(5, 6, (NodeRemove(1), EdgeRemove(2, 1)))) == Applied(6)
    assert m.edges == (Edge(3, 2),)
    assert m.roots == ()
    # free-list reuse: remove then add under the same id
    assert m.apply(Delta(6, 7, (NodeAdd(1, "string", b"new"), EdgeAdd(2, 1)))) == Applied(7)
    assert m.values()[1] == "new"
    assert m.edges == (Edge(2, 1), Edge(3, 2))


def test_edge_ops_have_set_semantics() -> None:
    m = synced()
    assert m.apply(Delta(5, 6, (EdgeAdd(2, 1), EdgeRemove(1, 3), EdgeAdd(3, 1)))) == Applied(6)
    assert m.edges == (Edge(2, 1), Edge(3, 1), Edge(3, 2))


def test_matching_state_hash_applies_and_mismatch_is_a_desync() -> None:
    m = synced()
    after = Snapshot(
        6,
        (
            NodeSnapshot(1, "i64", "resolved", i64(11)),
            NodeSnapshot(2, "i64", "resolved", i64(20)),
            NodeSnapshot(3, "string", "dirty"),
        ),
        (Edge(2, 1), Edge(3, 2)),
    )
    good = state_hash(after.nodes, after.edges)
    assert m.apply(Delta(5, 6, (CellSet(1, i64(11)),), good)) == Applied(6)
    assert m.state_hash() == good
    bad = bytes(32)
    result = m.apply(Delta(6, 7, (CellSet(1, i64(12)),), bad))
    assert result == ResyncRequest(last_epoch=6, reason="Desync")
    assert m.values()[1] == 11
    assert not m.in_sync


def test_snapshot_with_wrong_hash_or_dangling_refs_keeps_the_old_state() -> None:
    m = synced()
    before = m.snapshot()
    bad_hash = Snapshot(9, (NodeSnapshot(1, "i64", "resolved", i64(0)),), state_hash=bytes(32))
    assert m.apply(bad_hash) == ResyncRequest(last_epoch=5, reason="Desync")
    dangling = Snapshot(9, (NodeSnapshot(1, "i64", "unset"),), (Edge(1, 2),))
    assert m.apply(dangling) == ResyncRequest(last_epoch=5, reason="RemoteProtocolError")
    assert m.last_error is not None
    assert m.last_error.path == "edges[0]"
    twice = Snapshot(9, (NodeSnapshot(1, "i64", "unset"), NodeSnapshot(1, "i64", "unset")))
    assert isinstance(m.apply(twice), ResyncRequest)
    bad_root = Snapshot(9, (NodeSnapshot(1, "i64", "unset"),), roots=(4,))
    assert isinstance(m.apply(bad_root), ResyncRequest)
    assert m.snapshot() == before
    good = Snapshot(9, (NodeSnapshot(1, "i64", "resolved", i64(0)),))
    hashed = msgspec.structs.replace(good, state_hash=state_hash(good.nodes, ()))
    assert m.apply(hashed) == Applied(9)
    assert m.in_sync


def test_values_unknown_tag_raw_blob_as_ref_bad_bytes_raise() -> None:
    blob = BlobRef(0, 16, 1, 9, 7)
    m = Mirror()
    m.apply(
        Snapshot(
            1,
            (
                NodeSnapshot(1, "text/plain", "resolved", b"raw"),
                NodeSnapshot(2, "i64", "resolved", blob),
                NodeSnapshot(3, "i64", "opaque"),
            ),
        )
    )
    assert m.values() == {1: b"raw", 2: blob}
    m.apply(Delta(1, 2, (CellSet(3, b"\x01\x02"),)))
    with pytest.raises(TypeTagError) as info:
        m.values()
    assert info.value.path == "nodes[3]"


def test_values_use_the_mirrors_registry() -> None:
    registry = TypeRegistry()
    registry.register(
        "point",
        lambda p: f"{p[0]},{p[1]}".encode(),
        lambda b: tuple(int(x) for x in b.decode().split(",")),
    )
    m = Mirror(registry)
    m.apply(Snapshot(0, (NodeSnapshot(1, "point", "resolved", b"3,4"),)))
    assert m.values() == {1: (3, 4)}
    assert Mirror().apply(Snapshot(0, (NodeSnapshot(1, "point", "resolved", b"3,4"),)))


def test_non_state_plane_messages_are_ignored() -> None:
    m = synced()
    assert m.apply(ResyncRequest(last_epoch=1)) == Ignored(5, "not_state_plane")


def test_snapshot_before_first_snapshot_is_an_error() -> None:
    with pytest.raises(SnapshotRequired):
        Mirror().snapshot()


# --- properties: a model producer diffs random graph states into deltas ----------------------

SMALL_IDS = st.integers(0, 12)


@st.composite
def graph_states(draw: Any) -> tuple[dict[int, NodeSnapshot], set[tuple[int, int]]]:
    nodes = {n.slot_id: n for n in draw(st.lists(node_snapshots(SMALL_IDS), max_size=8))}
    ids = sorted(nodes)
    edges: set[tuple[int, int]] = set()
    if ids:
        pairs = st.tuples(st.sampled_from(ids), st.sampled_from(ids))
        edges = set(draw(st.lists(pairs, max_size=10)))
    return nodes, edges


def diff(
    old: tuple[dict[int, NodeSnapshot], set[tuple[int, int]]],
    new: tuple[dict[int, NodeSnapshot], set[tuple[int, int]]],
    slot_value: bool,
) -> list[DeltaOp]:
    """The ops a straightforward producer would send to go from ``old`` to ``new``."""
    old_nodes, old_edges = old
    new_nodes, new_edges = new
    readd = {
        sid
        for sid, n in old_nodes.items()
        if sid in new_nodes
        and new_nodes[sid] != n
        and (
            new_nodes[sid].type_tag != n.type_tag
            or new_nodes[sid].key != n.key
            or new_nodes[sid].state in ("unset", "opaque")
        )
    }
    removed = {sid for sid in old_nodes if sid not in new_nodes} | readd
    ops: list[DeltaOp] = [EdgeRemove(a, b) for a, b in sorted(old_edges - new_edges)]
    ops += [NodeRemove(sid) for sid in sorted(removed)]
    for sid, n in sorted(new_nodes.items()):
        if sid not in old_nodes or sid in readd:
            ops.append(NodeAdd(sid, n.type_tag, n.payload, n.key, n.state))
        elif n != old_nodes[sid]:
            if n.state == "dirty":
                ops.append(Invalidate(sid))
            else:
                assert n.payload is not None
                ops.append(SlotValue(sid, n.payload) if slot_value else CellSet(sid, n.payload))
    kept = {(a, b) for a, b in old_edges if a not in removed and b not in removed}
    ops += [EdgeAdd(a, b) for a, b in sorted(new_edges - kept)]
    return ops


def to_snapshot(
    epoch: int, state: tuple[dict[int, NodeSnapshot], set[tuple[int, int]]]
) -> Snapshot:
    nodes, edges = state
    return Snapshot(
        epoch, tuple(nodes[k] for k in sorted(nodes)), tuple(Edge(a, b) for a, b in sorted(edges))
    )


@given(st.lists(graph_states(), min_size=1, max_size=6), st.booleans(), st.booleans())
def test_mirror_follows_any_sequence_of_states(
    states: list[Any], slot_value: bool, with_hash: bool
) -> None:
    m = Mirror()
    assert m.apply(to_snapshot(0, states[0])) == Applied(0)
    for epoch, (old, new) in enumerate(itertools.pairwise(states), start=1):
        expected = to_snapshot(epoch, new)
        h = state_hash(expected.nodes, expected.edges) if with_hash else None
        delta = Delta(epoch - 1, epoch, tuple(diff(old, new, slot_value)), h)
        assert m.apply(delta) == Applied(epoch)
        assert m.snapshot() == expected
    assert m.in_sync


class LossyDelivery(RuleBasedStateMachine):
    """A producer's deltas reach a mirror dropped, duplicated and reordered; resync heals."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[Any] = [({}, set())]
        self.messages: list[Delta] = []
        self.in_flight: list[Delta | Snapshot] = [to_snapshot(0, self.states[0])]
        self.mirror = Mirror()

    @property
    def epoch(self) -> int:
        return len(self.states) - 1

    def answer(self, result: object) -> None:
        if isinstance(result, ResyncRequest):
            self.in_flight.append(to_snapshot(self.epoch, self.states[-1]))

    @rule(new=graph_states(), slot_value=st.booleans(), with_hash=st.booleans())
    def flush(self, new: Any, slot_value: bool, with_hash: bool) -> None:
        old = self.states[-1]
        self.states.append(new)
        expected = to_snapshot(self.epoch, new)
        h = state_hash(expected.nodes, expected.edges) if with_hash else None
        delta = Delta(self.epoch - 1, self.epoch, tuple(diff(old, new, slot_value)), h)
        self.messages.append(delta)
        self.in_flight.append(delta)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def deliver_any(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.in_flight) - 1))
        self.answer(self.mirror.apply(self.in_flight.pop(index)))

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def drop_one(self, data: st.DataObject) -> None:
        self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))

    @precondition(lambda self: self.messages)
    @rule(data=st.data())
    def redeliver_old(self, data: st.DataObject) -> None:
        delta = data.draw(st.sampled_from(self.messages))
        self.answer(self.mirror.apply(delta))

    @rule()
    def deliver_all_in_order_then_heal(self) -> None:
        while self.in_flight:
            self.answer(self.mirror.apply(self.in_flight.pop(0)))
        if not self.mirror.in_sync or self.mirror.last_epoch != self.epoch:
            # The request (or its answer) was lost: the receiver re-asks, the producer answers.
            self.mirror.resync_request()
            self.answer(self.mirror.apply(to_snapshot(self.epoch, self.states[-1])))
        assert self.mirror.in_sync
        assert self.mirror.last_epoch == self.epoch

    @invariant()
    def in_sync_mirror_equals_the_producer_at_its_epoch(self) -> None:
        m = self.mirror
        if m.in_sync:
            assert m.last_epoch is not None
            expected = to_snapshot(m.last_epoch, self.states[m.last_epoch])
            assert m.snapshot() == expected


LossyDelivery.TestCase.settings = settings(max_examples=40, stateful_step_count=30)
TestLossyDelivery = LossyDelivery.TestCase


def test_a_snapshot_from_a_restarted_sender_may_go_back_in_epochs() -> None:
    m = synced(5)
    assert m.apply(Delta(5, 6, (CellSet(1, i64(11)),))) == Applied(6)
    assert m.apply(base_snapshot(0)) == Applied(0)
    assert m.values() == {1: 10, 2: 20}
    assert m.apply(Delta(0, 1, (CellSet(2, i64(3)),))) == Applied(1)
    assert m.values() == {1: 10, 2: 3}


def test_names_from_snapshot_and_node_add_and_writes_by_name() -> None:
    from octosync import Context
    from octosync.errors import UnknownHandle
    from octosync.ipc.permissions import PeerPermissions
    from octosync.ipc.publisher import Publisher

    ctx = Context()
    score = ctx.cell(3, type_tag="i64", name="score")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    snap = pub.snapshot()
    assert [n.key for n in snap.nodes] == ["score"]
    label = ctx.cell("hi", type_tag="string", name="label")
    (delta,) = pub.drain()
    assert [op.key for op in delta.ops if isinstance(op, NodeAdd)] == ["label"]
    m = Mirror()
    with pytest.raises(SnapshotRequired):
        m.write("score", 1)
    m.apply(snap)
    m.apply(delta)
    assert m.names() == {"score": score.id, "label": label.id}
    write = m.write("score", 9)
    assert (write.base_epoch, write.epoch) == (delta.epoch, delta.epoch + 1)
    pub.apply_remote(list(write.ops))  # the producer's side accepts it as a cell_set
    assert score.get() == 9
    assert m.write(label.id, "yo").ops[0].payload == b"yo"
    with pytest.raises(UnknownHandle, match="no node is named 'nope'"):
        m.write("nope", 1)
    with pytest.raises(UnknownHandle):
        m.write(999, 1)
    with pytest.raises(TypeTagError):
        m.write("score", "not an int")
    assert m.values() == {score.id: 3, label.id: "hi"}  # writes change nothing locally


def test_a_removed_nodes_edges_come_back_when_the_delta_is_refused() -> None:
    from octosync.ipc.messages import Edge, EdgeAdd, NodeRemove, NodeSnapshot

    nodes = tuple(NodeSnapshot(i, "bytes", "resolved", b"v") for i in range(4))
    edges = (Edge(0, 1), Edge(2, 1), Edge(1, 3), Edge(0, 3))
    mirror = Mirror()
    mirror.apply(Snapshot(epoch=0, nodes=nodes, edges=edges, roots=(1,)))
    before = (mirror.nodes, mirror.edges, mirror.roots, mirror.state_hash())
    bad = Delta(0, 1, (NodeRemove(1), EdgeAdd(0, 2), NodeRemove(3), NodeRemove(3)))
    with pytest.raises(RemoteProtocolError) as err:
        mirror.apply_checked(bad)
    assert err.value.path == "ops[3]"
    assert (mirror.nodes, mirror.edges, mirror.roots, mirror.state_hash()) == before
    mirror.apply_checked(Delta(0, 1, (NodeRemove(1),)))
    assert mirror.edges == (Edge(0, 3),)
    assert mirror.roots == ()
