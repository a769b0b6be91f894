"""Node behaviour: laziness, eagerness, equality guards, errors, cycles, disposal."""

from __future__ import annotations

import pytest

from octosync import Context
from octosync.errors import ComputeError, CycleError, GraphError, TypeTagError


def test_cell_equal_write_changes_nothing() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i64")
    epoch = ctx.epoch
    a.set(1)
    assert ctx.epoch == epoch
    a.set(2)
    assert (a.get(), ctx.epoch) == (2, epoch + 1)


def test_equality_guard_distinguishes_types() -> None:
    ctx = Context()
    a = ctx.cell(1)
    epoch = ctx.epoch
    a.set(True)
    assert a.get() is True
    assert ctx.epoch == epoch + 1


def test_value_the_tag_cannot_carry_is_refused_and_changes_nothing() -> None:
    ctx = Context()
    a = ctx.cell(1, type_tag="i32")
    epoch = ctx.epoch
    with pytest.raises(TypeTagError):
        a.set("x")  # type: ignore[arg-type]
    with pytest.raises(TypeTagError):
        a.set(2**40)
    assert (a.get(), ctx.epoch) == (1, epoch)


def test_unknown_type_tag_is_refused() -> None:
    with pytest.raises(TypeTagError, match="nope"):
        Context().cell(1, type_tag="nope")


def test_memo_is_lazy_and_cached() -> None:
    ctx = Context()
    a = ctx.cell(1)
    calls: list[int] = []

    def double() -> int:
        calls.append(a.get())
        return a.get() * 2

    b = ctx.memo(double)
    assert calls == []
    a.set(5)
    assert calls == []
    assert (b.get(), b.get()) == (10, 10)
    assert calls == [5]
    a.set(6)
    assert calls == [5]
    assert b.get() == 12
    assert calls == [5, 6]


def test_memo_equality_suppresses_downstream_recompute() -> None:
    ctx = Context()
    a = ctx.cell(3)
    parity = ctx.memo(lambda: a.get() % 2)
    runs: list[int] = []

    def label() -> str:
        runs.append(parity.get())
        return "odd" if parity.get() else "even"

    b = ctx.memo(label)
    assert b.get() == "odd"
    a.set(5)  # parity recomputes to the same value
    assert b.get() == "odd"
    assert runs == [1]
    a.set(4)
    assert b.get() == "even"
    assert runs == [1, 0]


def test_dynamic_dependencies_drop_unread_sources() -> None:
    ctx = Context()
    flag = ctx.cell(True)
    x = ctx.cell(1)
    y = ctx.cell(2)
    calls: list[int] = []

    def pick() -> int:
        v = x.get() if flag.get() else y.get()
        calls.append(v)
        return v

    m = ctx.memo(pick)
    assert m.get() == 1
    assert set(m.dependencies) == {flag, x}
    flag.set(False)
    assert m.get() == 2
    assert set(m.dependencies) == {flag, y}
    assert m not in x.dependents
    x.set(100)  # no longer read: no recompute
    assert m.get() == 2
    assert calls == [1, 2]


def test_diamond_is_glitch_free() -> None:
    ctx = Context()
    a = ctx.cell(1)
    b = ctx.memo(lambda: a.get() * 2)
    c = ctx.signal(lambda: a.get() + 1)
    d = ctx.signal(lambda: (b.get(), c.get()))
    seen: list[tuple[int, int, tuple[int, int]]] = []
    ctx.effect(lambda: seen.append((b.get(), c.get(), d.get())))
    for value in (2, 3, 7):
        a.set(value)
    for bv, cv, (db, dc) in seen:
        assert bv == 2 * (cv - 1)
        assert (db, dc) == (bv, cv)
    assert [s[0] for s in seen] == [2, 4, 6, 14]


def test_failing_compute_is_never_cached() -> None:
    ctx = Context()
    a = ctx.cell(0)
    calls: list[int] = []

    def inverse() -> float:
        calls.append(a.get())
        return 1 / a.get()

    m = ctx.memo(inverse, type_tag="f64")
    for _ in range(2):
        with pytest.raises(ComputeError) as info:
            m.get()
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert calls == [0, 0]
    a.set(4)
    assert m.get() == 0.25


def test_error_reaches_readers_through_other_nodes_with_original_cause() -> None:
    ctx = Context()
    a = ctx.cell(0)
    m = ctx.memo(lambda: 1 // a.get())
    outer = ctx.memo(lambda: m.get() + 1)
    with pytest.raises(ComputeError) as info:
        outer.get()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_value_the_tag_cannot_encode_is_a_compute_error() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: "text" if a.get() else 0, type_tag="i64")
    with pytest.raises(ComputeError) as info:
        m.get()
    assert isinstance(info.value.__cause__, TypeTagError)


def test_self_cycle_is_detected() -> None:
    ctx = Context()
    holder: list[object] = []
    m = ctx.memo(lambda: holder[0].get() + 1)  # type: ignore[attr-defined]
    holder.append(m)
    with pytest.raises(CycleError):
        m.get()


def test_indirect_cycle_is_detected_when_it_closes() -> None:
    ctx = Context()
    closed = ctx.cell(False)
    nodes: dict[str, object] = {}
    a = ctx.memo(lambda: nodes["b"].get() if closed.get() else 0)  # type: ignore[attr-defined]
    b = ctx.memo(lambda: a.get() + 1)
    nodes["b"] = b
    assert b.get() == 1
    closed.set(True)
    with pytest.raises(CycleError):
        b.get()


def test_writing_a_derived_node_is_a_graph_error() -> None:
    ctx = Context()
    m = ctx.memo(lambda: 1)
    s = ctx.signal(lambda: 1)
    for node in (m, s):
        with pytest.raises(GraphError, match="derived"):
            node.set(2)


def test_writing_a_cell_inside_a_memo_is_a_graph_error() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.set(2))
    with pytest.raises(GraphError, match="while a memo"):
        m.get()
    assert a.get() == 1


def test_use_after_dispose_is_a_graph_error() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get())
    a.dispose()
    for action in (a.get, lambda: a.set(3), a.dispose):
        with pytest.raises(GraphError, match="disposed"):
            action()
    with pytest.raises(GraphError, match="disposed"):
        m.get()
    with pytest.raises(GraphError):
        ctx.node(a.id)


def test_disposed_id_is_reused() -> None:
    ctx = Context()
    a = ctx.cell(1)
    b = ctx.cell(2)
    a.dispose()
    c = ctx.cell(3)
    assert c.id == a.id
    assert ctx.node(c.id) is c
    assert b.id != c.id


def test_dispose_drops_edges_both_ways() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get())
    assert m.get() == 1
    m.dispose()
    assert a.dependents == ()


def test_long_chains_do_not_hit_the_recursion_limit() -> None:
    ctx = Context()
    a = ctx.cell(0)
    node: object = a
    for _ in range(3000):
        node = ctx.memo(lambda p=node: p.get() + 1)  # type: ignore[attr-defined]
        node.get()  # type: ignore[attr-defined]
    end = ctx.signal(lambda: node.get() * 2)  # type: ignore[attr-defined]
    a.set(1)
    assert end.get() == 6002
    assert node.get() == 3001  # type: ignore[attr-defined]


def test_disposing_inside_a_computation_is_a_graph_error() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.dispose())
    with pytest.raises(GraphError, match="while a memo"):
        m.get()
    assert a.get() == 1


def test_cycle_left_behind_by_a_swallowed_cycle_error_is_still_reported() -> None:
    """a and b end up reading each other (each swallowed the CycleError); pulling a change
    through them must report the cycle, not loop forever."""
    ctx = Context()
    trigger = ctx.cell(0)
    zero = ctx.memo(lambda: trigger.get() * 0)  # always equal: the walk goes on to b
    nodes: dict[str, object] = {}

    def swallowing(name: str, extra: int) -> int:
        try:
            return nodes[name].get() + extra  # type: ignore[attr-defined, no-any-return]
        except CycleError:
            return -1

    a = ctx.memo(lambda: zero.get() + swallowing("b", 0))
    b = ctx.memo(lambda: swallowing("a", 1))
    nodes.update(a=a, b=b)
    assert (a.get(), b.get()) == (-1, -1)  # b met the cycle and swallowed it
    assert set(a.dependencies) == {zero, b}
    assert set(b.dependencies) == {a}
    trigger.set(1)
    with pytest.raises(CycleError):
        a.get()
