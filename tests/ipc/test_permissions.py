"""PeerPermissions: default deny, independent grants, and the inbound write gate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync import Context
from octosync.errors import DecodeError, Forbidden
from octosync.graph.type_tags import default_registry
from octosync.ipc.messages import (
    CellSet,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    NodeAdd,
    NodeRemove,
    SlotValue,
)
from octosync.ipc.permissions import (
    KINDS,
    PeerPermissions,
    apply_remote_write,
    apply_remote_writes,
    trigger_remote_effect,
)
from octosync.ipc.publisher import Publisher
from tests.graph.models import build, graphs, writes


def _i64(value: int) -> bytes:
    return default_registry.encode("i64", value)


def test_default_is_deny() -> None:
    perms = PeerPermissions()
    assert not any(perms.allows(kind, 0) for kind in KINDS)


@given(
    grants=st.dictionaries(
        st.sampled_from(KINDS), st.sets(st.integers(0, 20), max_size=5), max_size=3
    ),
    probe=st.integers(0, 20),
)
def test_kinds_are_granted_independently(grants: dict[str, set[int]], probe: int) -> None:
    perms = PeerPermissions()
    for kind, ids in grants.items():
        perms.grant(kind, *ids)  # type: ignore[arg-type]
    for kind in KINDS:
        assert perms.allows(kind, probe) == (probe in grants.get(kind, set()))
    assert perms.filter_readable(range(21)) == sorted(grants.get("read", set()))


def test_allow_all_and_revoke() -> None:
    assert PeerPermissions.allow_all().can_write(12345)
    perms = PeerPermissions(read=[1, 2])
    perms.revoke("read", 1)
    assert (perms.can_read(1), perms.can_read(2)) == (False, True)
    with pytest.raises(ValueError, match="kind"):
        perms.grant("delete", 1)  # type: ignore[arg-type]


def test_permitted_cell_set_is_applied() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    apply_remote_write(ctx, PeerPermissions(write=[a.id]), CellSet(a.id, _i64(9)))
    assert a.get() == 9


@pytest.mark.parametrize(
    "op",
    [
        SlotValue(0, _i64(5)),
        Invalidate(0),
        NodeAdd(5, "i64", _i64(1)),
        NodeRemove(0),
        EdgeAdd(1, 0),
    ],
)
def test_ops_other_than_cell_set_are_forbidden(op: object) -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    epoch = ctx.epoch
    with pytest.raises(Forbidden, match="only send cell_set"):
        apply_remote_write(ctx, PeerPermissions.allow_all(), op)  # type: ignore[arg-type]
    assert (a.get(), ctx.epoch) == (1, epoch)


def test_write_without_grant_or_to_a_derived_node_is_forbidden() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    m = ctx.memo(lambda: a.get() + 1, type_tag="i64")
    reader = PeerPermissions(read=[a.id])
    with pytest.raises(Forbidden, match="no write permission") as info:
        apply_remote_write(ctx, reader, CellSet(a.id, _i64(2)))
    assert info.value.path == "op.slot_id"
    with pytest.raises(Forbidden, match="not a cell"):
        apply_remote_write(ctx, PeerPermissions(write=[m.id]), CellSet(m.id, _i64(2)))
    with pytest.raises(Forbidden, match="no writable cell"):
        apply_remote_write(ctx, PeerPermissions.allow_all(), CellSet(99, _i64(2)))
    assert a.get() == 1


def test_bad_payload_is_a_decode_error_naming_the_field() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    with pytest.raises(DecodeError) as info:
        apply_remote_write(ctx, PeerPermissions.allow_all(), CellSet(a.id, b"\x01"))
    assert info.value.path == "op.payload"
    assert a.get() == 1


def test_a_refused_op_in_a_batch_changes_nothing() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    b = ctx.cell(2, type_tag="i64")
    perms = PeerPermissions(write=[a.id])
    epoch = ctx.epoch
    with pytest.raises(Forbidden) as info:
        apply_remote_writes(ctx, perms, [CellSet(a.id, _i64(10)), CellSet(b.id, _i64(20))])
    assert info.value.path == "ops[1].slot_id"
    assert (a.get(), b.get(), ctx.epoch) == (1, 2, epoch)
    apply_remote_writes(ctx, perms, [CellSet(a.id, _i64(10)), CellSet(a.id, _i64(11))])
    assert (a.get(), ctx.epoch) == (11, epoch + 1)


def test_publisher_applies_remote_writes_and_publishes_them() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    other = Publisher(ctx, permissions=PeerPermissions.allow_all())
    writer = Publisher(ctx, permissions=PeerPermissions(read=[a.id], write=[a.id]))
    writer.apply_remote(CellSet(a.id, _i64(3)))
    assert other.drain()[0].ops == (CellSet(a.id, _i64(3)),)
    with pytest.raises(Forbidden):
        writer.apply_remote([Invalidate(a.id)])


def test_trigger_effect_needs_its_own_grant() -> None:
    ctx = Context()
    runs: list[int] = []
    e = ctx.effect(lambda: runs.append(1))
    with pytest.raises(Forbidden, match="trigger_effect"):
        trigger_remote_effect(ctx, PeerPermissions(read=[e.id], write=[e.id]), e.id)
    assert runs == [1]
    trigger_remote_effect(ctx, PeerPermissions(trigger_effect=[e.id]), e.id)
    assert runs == [1, 1]
    a = ctx.cell(0)
    with pytest.raises(Forbidden, match="not an effect"):
        trigger_remote_effect(ctx, PeerPermissions.allow_all(), a.id)


@given(
    graph=graphs(),
    batches=writes,
    readable=st.sets(st.integers(0, 14), max_size=10),
)
def test_restricted_view_is_the_full_view_filtered(
    graph: tuple[list[int], list[tuple[bool, list[int], int]]],
    batches: list[list[tuple[int, int]]],
    readable: set[int],
) -> None:
    """Every op a restricted peer gets is the full view's op, kept iff all its ids are readable."""
    cells, derived = graph
    ctx = Context()
    full = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode="lazy")
    part = Publisher(ctx, permissions=PeerPermissions(read=readable), mode="lazy")
    nodes = build(ctx, cells, derived)
    for batch in batches:
        with ctx.batch():
            for index, value in batch:
                if index < len(cells):
                    nodes[index].set(value)  # type: ignore[attr-defined]
    expected = []
    for delta in full.drain():
        kept = tuple(op for op in delta.ops if set(_ids(op)) <= readable)
        if kept:
            expected.append(kept)
    got = part.drain()
    assert [d.ops for d in got] == expected
    snap = part.snapshot()
    assert {n.slot_id for n in snap.nodes} == readable & {n.id for n in nodes}
    assert all({e.dependent, e.dependency} <= readable for e in snap.edges)


def _ids(op: object) -> tuple[int, ...]:
    if isinstance(op, EdgeAdd | EdgeRemove):
        return (op.dependent, op.dependency)
    return (op.slot_id,)  # type: ignore[attr-defined]
