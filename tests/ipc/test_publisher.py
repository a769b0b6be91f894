"""Publisher: snapshots and deltas per peer view, epochs, modes and the seed's invariants."""

from __future__ import annotations

import itertools

import pytest

from octosync import Context
from octosync.errors import GraphError
from octosync.graph.type_tags import TypeRegistry, default_registry
from octosync.ipc.messages import (
    CellSet,
    Delta,
    DeltaOp,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    SlotValue,
)
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher


def _i64(data: bytes | object) -> int:
    assert isinstance(data, bytes)
    value = default_registry.decode("i64", data)
    assert isinstance(value, int)
    return value


def _ops(deltas: list[Delta]) -> list[DeltaOp]:
    return [op for d in deltas for op in d.ops]


def _kinds(delta: Delta) -> list[str]:
    return [type(op).__name__ for op in delta.ops]


def test_snapshot_lists_nodes_edges_and_roots() -> None:
    ctx = Context()
    a = ctx.cell(2, type_tag="i64")
    m = ctx.memo(lambda: a.get() * 10, type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    snap = pub.snapshot()
    assert snap.epoch == ctx.epoch == pub.epoch
    by_id = {n.slot_id: n for n in snap.nodes}
    assert _i64(by_id[a.id].payload) == 2
    assert _i64(by_id[m.id].payload) == 20  # value mode resolved the memo
    assert by_id[m.id].state == "resolved"
    assert snap.edges == (Edge(dependent=m.id, dependency=a.id),)
    assert snap.roots == (a.id,)


def test_lazy_snapshot_leaves_unread_memos_unset_and_dirty_ones_dirty() -> None:
    ctx = Context()
    a = ctx.cell(2, type_tag="i64")
    unread = ctx.memo(lambda: a.get() + 1, type_tag="i64")
    read = ctx.memo(lambda: a.get() + 2, type_tag="i64")
    assert read.get() == 4
    a.set(3)
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode="lazy")
    states = {n.slot_id: n.state for n in pub.snapshot().nodes}
    assert states == {a.id: "resolved", unread.id: "unset", read.id: "dirty"}


def test_one_delta_per_outermost_flush_chained_on_the_context_epoch() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    start = pub.snapshot().epoch
    with ctx.batch():
        a.set(2)
        with ctx.batch():
            a.set(3)
    a.set(4)
    a.set(4)  # equal: no flush
    deltas = pub.drain()
    assert [(d.base_epoch, d.epoch) for d in deltas] == [(start, start + 1), (start + 1, start + 2)]
    assert deltas[-1].epoch == ctx.epoch
    assert [[_i64(op.payload) for op in d.ops if isinstance(op, CellSet)] for d in deltas] == [
        [3],
        [4],
    ]
    assert pub.drain() == []


def test_restricted_peer_gets_nothing_for_invisible_flushes_and_its_chain_stays_gapless() -> None:
    ctx = Context()
    seen_cell = ctx.cell(0, type_tag="i64")
    hidden = ctx.cell(0, type_tag="i64")
    full = Publisher(ctx, permissions=PeerPermissions.allow_all())
    part = Publisher(ctx, permissions=PeerPermissions(read=[seen_cell.id]))
    assert part.snapshot().epoch == full.snapshot().epoch
    hidden.set(1)
    seen_cell.set(1)
    hidden.set(2)
    seen_cell.set(2)
    full_deltas, part_deltas = full.drain(), part.drain()
    assert len(full_deltas) == 4
    assert full.epoch == ctx.epoch
    assert len(part_deltas) == 2
    for prev, nxt in itertools.pairwise(part_deltas):
        assert nxt.base_epoch == prev.epoch
    assert part.epoch < ctx.epoch
    assert all(op.slot_id == seen_cell.id for op in _ops(part_deltas))  # type: ignore[union-attr]
    assert part.snapshot().epoch == part.epoch


def test_publisher_created_later_starts_at_the_context_epoch() -> None:
    ctx = Context()
    a = ctx.cell(0)
    for i in range(1, 4):
        a.set(i)
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    assert pub.epoch == ctx.epoch == 4  # the cell's creation was a flush too
    a.set(9)
    (delta,) = pub.drain()
    assert (delta.base_epoch, delta.epoch) == (4, 5)


def test_all_seven_ops_in_apply_order() -> None:
    ctx = Context()
    flag = ctx.cell(True, type_tag="bool")
    x = ctx.cell(1, type_tag="i64")
    y = ctx.cell(2, type_tag="i64")
    pick = ctx.memo(lambda: x.get() if flag.get() else y.get(), type_tag="i64")
    doomed = ctx.memo(lambda: x.get() * 3, type_tag="i64")
    watcher = ctx.memo(lambda: y.get() + 100, type_tag="i64")
    lazy = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode="lazy")
    assert (pick.get(), doomed.get(), watcher.get()) == (1, 3, 102)
    lazy.drain()
    with ctx.batch():
        doomed.dispose()
        fresh = ctx.cell(7, type_tag="i64")  # takes doomed's id
        flag.set(False)
        y.set(5)
        assert pick.get() == 5  # recomputed in the batch: slot_value, edges move x -> y
    (delta,) = lazy.drain()
    assert fresh.id == doomed.id
    assert delta.ops == (
        EdgeRemove(doomed.id, x.id),
        EdgeRemove(pick.id, x.id),
        NodeRemove(doomed.id),
        NodeAdd(fresh.id, "i64", default_registry.encode("i64", 7)),
        EdgeAdd(pick.id, y.id),
        CellSet(flag.id, b"\x00"),
        CellSet(y.id, default_registry.encode("i64", 5)),
        SlotValue(pick.id, default_registry.encode("i64", 5)),
        Invalidate(watcher.id),
    )


def test_equal_cell_write_emits_nothing() -> None:
    ctx = Context()
    a = ctx.cell(5, type_tag="i64")
    ctx.memo(lambda: a.get() + 1, type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    pub.drain()
    epoch = pub.epoch
    a.set(5)
    with ctx.batch():
        a.set(6)
        a.set(5)
    assert pub.drain() == []
    assert pub.epoch == epoch


def test_memo_equality_suppresses_slot_value_and_downstream_ops() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    parity = ctx.memo(lambda: a.get() % 2, type_tag="i64")
    label = ctx.memo(lambda: "odd" if parity.get() else "even", type_tag="string")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    pub.snapshot()
    pub.drain()
    a.set(3)
    (delta,) = pub.drain()
    assert delta.ops == (CellSet(a.id, default_registry.encode("i64", 3)),)
    a.set(4)
    (delta,) = pub.drain()
    assert [getattr(op, "slot_id", None) for op in delta.ops] == [a.id, parity.id, label.id]
    assert _kinds(delta) == ["CellSet", "SlotValue", "SlotValue"]


def test_coalesced_frontier_dependent_appears_once() -> None:
    ctx = Context()
    cells = [ctx.cell(i, type_tag="i64") for i in range(5)]
    total = ctx.memo(lambda: sum(c.get() for c in cells), type_tag="i64")
    double = ctx.signal(lambda: total.get() * 2, type_tag="i64")
    for mode in ("value", "lazy"):
        pub = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode=mode)  # type: ignore[arg-type]
        with ctx.batch():
            for c in cells:
                c.set(c.get() + 10)
        (delta,) = pub.drain()
        ids = [op.slot_id for op in delta.ops if not isinstance(op, CellSet)]  # type: ignore[union-attr]
        assert sorted(ids) == sorted({total.id, double.id})
        pub.close()


def test_lazy_mode_emits_bare_invalidate_and_does_not_compute() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        return a.get() + 1

    m = ctx.memo(slow, type_tag="i64")
    s = ctx.signal(lambda: a.get() * 2, type_tag="i64")
    assert m.get() == 2
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode="lazy")
    a.set(5)
    (delta,) = pub.drain()
    assert Invalidate(m.id) in delta.ops
    assert SlotValue(s.id, default_registry.encode("i64", 10)) in delta.ops  # eager: concrete
    assert not any(isinstance(op, Invalidate) and op.slot_id == s.id for op in delta.ops)
    assert len(calls) == 1


def test_value_mode_resolves_dirty_readable_memos_only() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    calls: list[str] = []

    def tracked(name: str, k: int) -> int:
        calls.append(name)
        return a.get() * k

    shown = ctx.memo(lambda: tracked("shown", 2), type_tag="i64")
    hidden = ctx.memo(lambda: tracked("hidden", 3), type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions(read=[a.id, shown.id]))
    pub.snapshot()  # resolves what the peer can read, as a flush of its own
    assert calls == ["shown"]
    pub.drain()
    a.set(4)
    (delta,) = pub.drain()
    assert SlotValue(shown.id, default_registry.encode("i64", 8)) in delta.ops
    assert "hidden" not in calls
    assert all(getattr(op, "slot_id", None) != hidden.id for op in delta.ops)


def test_unreadable_nodes_and_their_edges_are_omitted() -> None:
    ctx = Context()
    secret = ctx.cell(1, type_tag="i64")
    public = ctx.cell(2, type_tag="i64")
    both = ctx.memo(lambda: secret.get() + public.get(), type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions(read=[public.id, both.id]))
    snap = pub.snapshot()
    assert {n.slot_id for n in snap.nodes} == {public.id, both.id}
    assert snap.edges == (Edge(both.id, public.id),)
    assert snap.roots == (public.id,)
    pub.drain()
    secret.set(10)
    (delta,) = pub.drain()
    assert delta.ops == (SlotValue(both.id, default_registry.encode("i64", 12)),)


def test_payloads_use_the_publishers_registry() -> None:
    registry = TypeRegistry()
    registry.register("point", lambda p: f"{p[0]},{p[1]}".encode(), lambda b: b.decode())
    ctx = Context(registry=registry)
    p = ctx.cell((1, 2), type_tag="point")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    (node,) = pub.snapshot().nodes
    assert (node.type_tag, node.payload) == ("point", b"1,2")
    p.set((3, 4))
    assert pub.drain()[0].ops == (CellSet(p.id, b"3,4"),)


def test_overflowing_publisher_is_marked_lagged() -> None:
    ctx = Context()
    a = ctx.cell(0)
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all(), max_pending=3)
    for i in range(1, 6):
        a.set(i)
    assert pub.lagged
    assert len(pub.drain()) <= 3
    pub.snapshot()
    assert not pub.lagged


def test_closed_publisher_stops_following() -> None:
    ctx = Context()
    a = ctx.cell(0)
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    pub.close()
    a.set(1)
    assert pub.drain() == []


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        Publisher(Context(), mode="eager")  # type: ignore[arg-type]


def test_default_permissions_deny_everything() -> None:
    ctx = Context()
    a = ctx.cell(1)
    pub = Publisher(ctx)
    a.set(2)
    assert pub.snapshot().nodes == ()
    assert pub.drain() == []


def test_snapshot_inside_a_batch_is_refused() -> None:
    ctx = Context()
    a = ctx.cell(1)
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    with ctx.batch():
        a.set(2)
        with pytest.raises(GraphError, match="inside a batch"):
            pub.snapshot()
    assert pub.snapshot().epoch == ctx.epoch


def test_closing_a_value_publisher_stops_resolving_memos() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    m = ctx.memo(lambda: a.get() + 1, type_tag="i64")
    pub = Publisher(ctx, permissions=PeerPermissions.allow_all())
    pub.snapshot()
    a.set(2)
    assert m.resolved
    pub.close()
    a.set(3)
    assert not m.resolved
    assert m.get() == 4
