"""The index's structure: shared nodes, caches, replay, and cleanup after removal."""

from __future__ import annotations

from typing import Any

from octosync.dataspace import Record, _, analyse, capture, key
from octosync.dataspace.skeleton import Index, Observer


def add(index: Index, v: Any) -> None:
    index.add_assertion(key(v), v)


def test_same_shape_shares_a_node_and_constants_share_a_map() -> None:
    index = Index()
    a, b = Observer(), Observer()
    index.add_handler(analyse(Record("present", "alice", capture())), a)
    index.add_handler(analyse(Record("present", "bob", capture())), b)
    (classes,) = index.root.edges.values()
    assert list(classes) == [("present", 2)]
    node = classes[("present", 2)]
    (cmap,) = node.cont.table.values()
    assert set(cmap.leaves) == {("alice",), ("bob",)}
    assert cmap.handler_count == 2


def test_new_shapes_inherit_the_matching_cached_values() -> None:
    index = Index()
    for v in (Record("p", 1), Record("p", 2), Record("q", 1), [1], "x"):
        add(index, v)
    seen: list[Any] = []
    index.add_handler(analyse(Record("p", capture())), Observer(on_add=seen.append))
    (classes,) = index.root.edges.values()
    assert list(classes[("p", 1)].cont.cache.values()) == [Record("p", 1), Record("p", 2)]
    assert seen == [(1,), (2,)]
    assert len(index.root.cont.cache) == 5


def test_assertions_without_handlers_create_no_leaves() -> None:
    index = Index()
    index.add_handler(analyse(Record("p", capture())), Observer())
    for i in range(10):
        add(index, Record("q", i))
    assert all(
        not n.cont.table for c in index.root.edges.values() for n in c.values() if n.cont.cache
    )


def test_removing_handlers_prunes_leaves_and_constant_maps_but_keeps_shapes() -> None:
    index = Index()
    a, b = Observer(), Observer()
    sk_a = analyse(Record("present", "alice", capture()))
    sk_b = analyse(Record("present", "bob", _))
    index.add_handler(sk_a, a)
    index.add_handler(sk_b, b)
    add(index, Record("present", "carol", 1))
    node = index.root.edges[(0, 0)][("present", 2)]
    cmap = node.cont.table[sk_a.const_paths]
    assert set(cmap.leaves) == {("alice",), ("bob",), ("carol",)}
    assert index.remove_handler(sk_a, a)
    assert set(cmap.leaves) == {("bob",), ("carol",)}
    assert not index.remove_handler(sk_a, a)
    assert index.remove_handler(sk_b, b)
    assert node.cont.table == {}
    assert index.root.edges[(0, 0)][("present", 2)] is node  # the shape stays
    assert list(node.cont.cache.values()) == [Record("present", "carol", 1)]


def test_one_handler_many_observers_each_get_a_replay() -> None:
    index = Index()
    add(index, Record("p", 1))
    add(index, Record("p", 2))
    add(index, Record("p", 1.0))
    first: list[Any] = []
    second: list[Any] = []
    sk = analyse(Record("p", capture()))
    index.add_handler(sk, Observer(on_add=first.append))
    index.add_handler(sk, Observer(on_add=second.append))
    assert first == second == [(1,), (2,), (1.0,)]
    assert type(first[2][0]) is float
