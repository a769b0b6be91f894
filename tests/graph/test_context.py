"""Context: batching, epochs, change sets, checked against a plain-Python model."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from octosync import Context
from octosync.graph import ChangeSet, Node


def _record(ctx: Context) -> list[ChangeSet]:
    seen: list[ChangeSet] = []
    ctx.subscribe(seen.append)
    return seen


def test_one_change_set_per_outermost_batch_with_net_effect() -> None:
    ctx = Context()
    a = ctx.cell(1)
    b = ctx.cell(1)
    seen = _record(ctx)
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
    seen = _record(ctx)
    epoch = ctx.epoch
    with ctx.batch():
        a.set(2)
        a.set(1)
    assert (seen, ctx.epoch) == ([], epoch)


def test_added_and_removed_in_one_batch_leaves_no_trace() -> None:
    ctx = Context()
    seen = _record(ctx)
    with ctx.batch():
        ctx.cell(1).dispose()
    assert seen == []


def test_id_reuse_reads_as_remove_then_add() -> None:
    ctx = Context()
    a = ctx.cell(1)
    m = ctx.memo(lambda: a.get())
    assert m.get() == 1
    seen = _record(ctx)
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
    seen = _record(ctx)
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
    seen = _record(ctx)
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
    seen = _record(ctx)
    a.dispose()
    (changes,) = seen
    assert changes.removed == [a]
    assert changes.edges_removed == [(m, a)]
    assert changes.invalidated == [m]


def test_effects_are_not_in_change_sets() -> None:
    ctx = Context()
    a = ctx.cell(1)
    seen = _record(ctx)
    e = ctx.effect(lambda: a.get())
    e.dispose()
    assert seen == []


def test_node_ids_fit_the_wire() -> None:
    ctx = Context()
    ids = [ctx.cell(i).id for i in range(50)]
    assert ids == list(range(50))
    assert all(i < 2**53 for i in ids)


# --- property: the graph agrees with a from-scratch model --------------------------------------


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[int], list[tuple[bool, list[int], int]]]:
    """Cells' initial values, then derived nodes as (eager, sources, modulus)."""
    cells = draw(st.lists(st.integers(-5, 5), min_size=1, max_size=6))
    derived: list[tuple[bool, list[int], int]] = []
    for i in range(draw(st.integers(1, 8))):
        upstream = len(cells) + i
        sources = draw(st.lists(st.integers(0, upstream - 1), min_size=1, max_size=3, unique=True))
        derived.append((draw(st.booleans()), sources, draw(st.integers(2, 4))))
    return cells, derived


def _build(
    ctx: Context, cells: list[int], derived: list[tuple[bool, list[int], int]]
) -> list[Node]:
    nodes: list[Node] = [ctx.cell(v, type_tag="i64") for v in cells]
    for eager, sources, modulus in derived:
        deps = [nodes[s] for s in sources]

        def fn(deps: list[Node] = deps, modulus: int = modulus) -> int:
            return sum(d.get() for d in deps) % modulus  # type: ignore[attr-defined]

        make: Callable[..., Node] = ctx.signal if eager else ctx.memo
        nodes.append(make(fn, type_tag="i64"))
    return nodes


def _model(cells: list[int], derived: list[tuple[bool, list[int], int]]) -> list[int]:
    values = list(cells)
    for _, sources, modulus in derived:
        values.append(sum(values[s] for s in sources) % modulus)
    return values


writes = st.lists(
    st.lists(st.tuples(st.integers(0, 5), st.integers(-5, 5)), max_size=6), max_size=6
)


@given(graph=graphs(), batches=writes)
def test_value_mode_change_sets_match_the_model(
    graph: tuple[list[int], list[tuple[bool, list[int], int]]],
    batches: list[list[tuple[int, int]]],
) -> None:
    cells, derived = graph
    ctx = Context()
    ctx.add_resolver(lambda node: True)
    nodes = _build(ctx, cells, derived)
    seen = _record(ctx)
    state = list(cells)
    flushes = 0
    for batch in batches:
        before = _model(state, derived)
        with ctx.batch():
            for index, value in batch:
                if index < len(cells):
                    nodes[index].set(value)  # type: ignore[attr-defined]
                    state[index] = value
        after = _model(state, derived)
        changed = {i for i in range(len(after)) if after[i] != before[i]}
        if not changed:
            assert len(seen) == flushes
            continue
        flushes += 1
        assert len(seen) == flushes
        changes = seen[-1]
        assert changes.epoch == ctx.epoch
        assert {n.id for n in changes.cells} == {i for i in changed if i < len(cells)}
        assert {n.id for n in changes.values} == {i for i in changed if i >= len(cells)}
        assert changes.invalidated == []
        assert len(changes.values) == len(set(changes.values))  # coalesced frontier
        for node in nodes[len(cells) :]:
            assert node.resolved
        assert [n.get() for n in nodes] == after  # type: ignore[attr-defined]


@given(graph=graphs(), batches=writes)
def test_lazy_flushes_and_eager_values_match_the_model(
    graph: tuple[list[int], list[tuple[bool, list[int], int]]],
    batches: list[list[tuple[int, int]]],
) -> None:
    cells, derived = graph
    ctx = Context()
    nodes = _build(ctx, cells, derived)
    seen = _record(ctx)
    state = list(cells)
    flushes = 0
    for batch in batches:
        before = list(state)
        with ctx.batch():
            for index, value in batch:
                if index < len(cells):
                    nodes[index].set(value)  # type: ignore[attr-defined]
                    state[index] = value
        flushes += state != before
        assert len(seen) == flushes
        expected = _model(state, derived)
        for changes in seen:
            assert all(n.kind == "memo" for n in changes.invalidated)
        for i, node in enumerate(nodes):
            if node.kind == "signal":
                assert node.resolved
                assert node.get() == expected[i]  # type: ignore[attr-defined]
