"""Change sets: the net effect of one flush, in the shape a publisher turns into a Delta."""

from __future__ import annotations

from octosync import Context
from tests.graph.models import record_changes


def test_one_change_set_per_outermost_batch_with_net_effect() -> None:
    ctx = Context()
    a = ctx.cell(1)
    b = ctx.cell(1)
    seen = record_changes(ctx)
    with ctx.batch():
        a.set(2)
        with ctx.batch():
            a.set(3)
            b.set(5)
            b.set(1)  # back to its value before the batch
    assert len(seen) == 1
    assert seen[0].cells == [a]
    assert seen[0].epoch == ctx.epoch


def test_batch_that_changes_nothing_emits_nothing() -> None:
    ctx = Context()
    a = ctx.cell(1)
    seen = record_changes(ctx)
    epoch = ctx.epoch
    with ctx.batch():
        a.set(2)
        a.set(1)
    assert (seen, ctx.epoch) == ([], epoch)


def test_added_and_removed_in_one_batch_leaves_no_trace() -> None:
    ctx = Context()
    seen = record_changes(ctx)
    with ctx.batch():
        ctx.cell(1).dispose()
    assert seen == []


def test_id_reuse_reads_as_remove_then_add() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get())
    assert m.get() == 1
    seen = record_changes(ctx)
    with ctx.batch():
        m.dispose()
        n = ctx.memo(lambda: a.get() + 1)
        assert n.id == m.id
        assert n.get() == 2
    (changes,) = seen
    assert changes.removed == [m]
    assert changes.added == [n]
    assert changes.edges_removed == [(m, a)]
    assert changes.edges_added == [(n, a)]


def test_changed_dependencies_are_reported_as_edge_changes() -> None:
    ctx = Context()
    flag = ctx.cell(True)
    x = ctx.cell(1)
    y = ctx.cell(2)
    s = ctx.signal(lambda: x.get() if flag.get() else y.get())
    seen = record_changes(ctx)
    flag.set(False)
    (changes,) = seen
    assert changes.edges_removed == [(s, x)]
    assert changes.edges_added == [(s, y)]
    assert changes.values == [s]


def test_lazy_memo_is_reported_invalidated_and_later_resolved() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get() + 1)
    assert m.get() == 2
    seen = record_changes(ctx)
    a.set(5)
    assert seen[-1].invalidated == [m]
    assert m.get() == 6  # a read outside a batch is published as its own flush
    assert seen[-1].values == [m]
    assert len(seen) == 2


def test_disposing_a_dependency_invalidates_dependents() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get())
    assert m.get() == 1
    seen = record_changes(ctx)
    a.dispose()
    (changes,) = seen
    assert changes.removed == [a]
    assert changes.edges_removed == [(m, a)]
    assert changes.invalidated == [m]


def test_effects_are_not_in_change_sets() -> None:
    ctx = Context()
    a = ctx.cell(1)
    seen = record_changes(ctx)
    e = ctx.effect(lambda: a.get())
    e.dispose()
    assert seen == []
