"""Context: batching, epochs, change sets, checked against a plain-Python model."""

from __future__ import annotations

from hypothesis import given

from octosync import Context
from tests.graph.models import build, graphs, model, record_changes, writes


def test_node_ids_fit_the_wire() -> None:
    ctx = Context()
    ids = [ctx.cell(i).id for i in range(50)]
    assert ids == list(range(50))
    assert all(i < 2**53 for i in ids)


# --- property: the graph agrees with a from-scratch model --------------------------------------


@given(graph=graphs(), batches=writes)
def test_value_mode_change_sets_match_the_model(
    graph: tuple[list[int], list[tuple[bool, list[int], int]]],
    batches: list[list[tuple[int, int]]],
) -> None:
    cells, derived = graph
    ctx = Context()
    ctx.add_resolver(lambda node: True)
    nodes = build(ctx, cells, derived)
    seen = record_changes(ctx)
    state = list(cells)
    flushes = 0
    for batch in batches:
        before = model(state, derived)
        with ctx.batch():
            for index, value in batch:
                if index < len(cells):
                    nodes[index].set(value)  # type: ignore[attr-defined]
                    state[index] = value
        after = model(state, derived)
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
def test_lazy_flushes_and_eager_values_match_themodel(
    graph: tuple[list[int], list[tuple[bool, list[int], int]]],
    batches: list[list[tuple[int, int]]],
) -> None:
    cells, derived = graph
    ctx = Context()
    nodes = build(ctx, cells, derived)
    seen = record_changes(ctx)
    observed: list[list[int]] = []
    signals = [n for n in nodes if n.kind == "signal"]
    ctx.effect(lambda: observed.append([s.get() for s in signals]))  # type: ignore[attr-defined]
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
        expected = model(state, derived)
        for changes in seen:
            assert all(n.kind == "memo" for n in changes.invalidated)
        for i, node in enumerate(nodes):
            if node.kind == "signal":
                assert node.resolved
                assert node.get() == expected[i]  # type: ignore[attr-defined]
        # glitch-free: the effect saw exactly the model's values, never a mix
        assert observed[-1] == [expected[n.id] for n in signals]


def test_names_are_unique_valid_keys_and_freed_on_dispose() -> None:
    import pytest

    from octosync.errors import GraphError

    ctx = Context()
    score = ctx.cell(1, type_tag="i64", name="score")
    double = ctx.memo(lambda: score.get() * 2, type_tag="i64", name="stats/double")
    assert (score.name, double.name) == ("score", "stats/double")
    assert ctx.named("stats/double") is double
    assert ctx.cell(0).name is None
    with pytest.raises(GraphError, match="taken by node"):
        ctx.signal(lambda: 0, name="score")
    for bad in ("", "/lead", "trail/", "a//b"):
        with pytest.raises(GraphError, match="bad node name"):
            ctx.cell(0, name=bad)
    double.dispose()
    with pytest.raises(GraphError, match="no live node named"):
        ctx.named("stats/double")
    again = ctx.cell(5, name="stats/double")
    assert ctx.named("stats/double") is again
