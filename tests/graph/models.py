"""Random reactive graphs and a from-scratch model of their values, shared by property tests."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from octosync import Context
from octosync.graph import ChangeSet, Node

Shape = tuple[list[int], list[tuple[bool, list[int], int]]]
"""Cells' initial values, then derived nodes as (eager, source indexes, modulus)."""


@st.composite
def graphs(draw: st.DrawFn) -> Shape:
    cells = draw(st.lists(st.integers(-5, 5), min_size=1, max_size=6))
    derived: list[tuple[bool, list[int], int]] = []
    for i in range(draw(st.integers(1, 8))):
        upstream = len(cells) + i
        sources = draw(st.lists(st.integers(0, upstream - 1), min_size=1, max_size=3, unique=True))
        derived.append((draw(st.booleans()), sources, draw(st.integers(2, 4))))
    return cells, derived


def build(ctx: Context, cells: list[int], derived: list[tuple[bool, list[int], int]]) -> list[Node]:
    nodes: list[Node] = [ctx.cell(v, type_tag="i64") for v in cells]
    for eager, sources, modulus in derived:
        deps = [nodes[s] for s in sources]

        def fn(deps: list[Node] = deps, modulus: int = modulus) -> int:
            return sum(d.get() for d in deps) % modulus  # type: ignore[attr-defined]

        make: Callable[..., Node] = ctx.signal if eager else ctx.memo
        nodes.append(make(fn, type_tag="i64"))
    return nodes


def model(cells: list[int], derived: list[tuple[bool, list[int], int]]) -> list[int]:
    values = list(cells)
    for _, sources, modulus in derived:
        values.append(sum(values[s] for s in sources) % modulus)
    return values


writes = st.lists(
    st.lists(st.tuples(st.integers(0, 5), st.integers(-5, 5)), max_size=6), max_size=6
)


def record_changes(ctx: Context) -> list[ChangeSet]:
    """Every change set the context hands to listeners from now on."""
    seen: list[ChangeSet] = []
    ctx.subscribe(seen.append)
    return seen
