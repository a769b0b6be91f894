from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import MerkleTree, Timestamp, hashing
from octosync.crdt.hashing import combine, fmix32, fnv1a32, fnv1a32_many, lww_item_hash
from octosync.crdt.merkle import leaf_indices, node_path, nodes_from_leaves
from octosync.errors import InvalidBucketPath, LocalProtocolError

# TopGun merkle_vectors.json "lww: eight keys across partitions": leaf hashes fed in directly.
FLAT_LEAVES = {
    "user:1": 305419896,
    "user:2": 2596069104,
    "todo:42": 4294967295,
    "cart:7": 1,
    "ключ-😀-鍵": 3735928559,
    "settings": 2147483648,
    "session:abc": 19088743,
    "z": 4022250974,
}
FLAT_ROOT = 3501820274
FLAT_BUCKETS = {
    "": {"2": 2229065008, "3": 4185599465, "6": 3772441717, "e": 1461123477, "f": 616243918},
    "2": {"4": 261872116},
    "3": {"2": 3807975093, "4": 3268920208},
    "6": {"8": 596704805, "d": 2396839605, "e": 1623528250},
    "e": {"1": 804215951},
    "f": {"f": 3917852160},
}


def test_flat_trie_vector_matches_topgun() -> None:
    tree = MerkleTree.from_items(FLAT_LEAVES.items())
    assert tree.root() == FLAT_ROOT
    for path, expected in FLAT_BUCKETS.items():
        assert tree.buckets(path) == expected
    # Inserting then removing an extra key restores root and buckets exactly.
    tree.set_item("extra-key-0", 0x1234ABCD)
    assert tree.root() != FLAT_ROOT
    tree.remove("extra-key-0")
    assert tree.root() == FLAT_ROOT
    assert tree.buckets("") == FLAT_BUCKETS[""]


def reference_root(items: dict[str, int], depth: int) -> tuple[int, dict[str, int]]:
    """From scratch, by the definition: group by hex prefix, combine bottom-up."""
    nodes: dict[str, int] = {}
    by_leaf: dict[str, list[int]] = {}
    for key, h in items.items():
        by_leaf.setdefault(format(fnv1a32(key), "08x")[:depth], []).append(h)
    level = {path: combine(hs) for path, hs in by_leaf.items()}
    nodes.update(level)
    for _ in range(depth):
        parents: dict[str, list[int]] = {}
        for path, h in level.items():
            parents.setdefault(path[:-1], []).append(h)
        level = {path: combine(hs) for path, hs in parents.items()}
        nodes.update(level)
    return level.get("", 0), nodes


keys = st.text(min_size=0, max_size=6)
writes = st.lists(st.tuples(st.booleans(), keys, st.integers(0, 2**32 - 1)), max_size=60)


@given(writes, st.integers(1, 4))
def test_incremental_equals_from_scratch(ops: list[tuple[bool, str, int]], depth: int) -> None:
    tree = MerkleTree(depth)
    model: dict[str, int] = {}
    for is_remove, key, h in ops:
        if is_remove:
            tree.remove(key)
            model.pop(key, None)
        else:
            tree.set_item(key, h)
            model[key] = h
    root, nodes = reference_root(model, depth)
    assert tree.root() == root
    assert dict(tree.items()) == model
    assert len(tree) == len(model)
    fresh = MerkleTree.from_items(model.items(), depth)
    assert fresh.root() == tree.root()
    for path, h in nodes.items():
        assert tree.node_hash(path) == h
        if len(path) < depth:
            assert tree.buckets(path) == fresh.buckets(path)
            expected = {
                p[-1]: v
                for p, v in nodes.items()
                if p[:-1] == path and len(p) == len(path) + 1 and v
            }
            assert tree.buckets(path) == expected
        else:
            assert set(tree.leaf(path)) == {k for k in model if tree.leaf_path(k) == path}


def test_update_uses_topgun_lww_entry_hash() -> None:
    tree = MerkleTree()
    ts = Timestamp(1700000000000, 0, "node-a")
    tree.update("user:1", ts)
    leaf = tree.leaf(tree.leaf_path("user:1"))
    assert leaf == {"user:1": 1592194921}
    assert tree.leaf_path("user:1") == format(fnv1a32("user:1"), "08x")[:3]
    tree.update("user:1", Timestamp(1700000000001, 0, "node-a"))
    assert tree.leaf(tree.leaf_path("user:1")) == {
        "user:1": lww_item_hash("user:1", 1700000000001, 0, "node-a")
    }


def test_empty_and_removed_trees_hash_to_zero() -> None:
    tree = MerkleTree()
    assert tree.root() == 0
    assert tree.buckets("") == {}
    tree.update("a", Timestamp(1, 0, "n"))
    tree.remove("a")
    tree.remove("never-there")
    assert tree.root() == 0
    assert tree.buckets("") == {}


@pytest.mark.parametrize("path", ["xyz", "0123", "g", "00/11"])
def test_bad_paths_are_rejected(path: str) -> None:
    tree = MerkleTree()
    with pytest.raises(InvalidBucketPath):
        tree.buckets(path)


def test_slash_paths_and_leaf_length() -> None:
    tree = MerkleTree.from_items(FLAT_LEAVES.items())
    assert tree.buckets("6") == tree.buckets("6/")
    leaf_path = tree.leaf_path("z")
    assert tree.leaf("/".join(leaf_path)) == {"z": FLAT_LEAVES["z"]}
    with pytest.raises(InvalidBucketPath):
        tree.leaf(leaf_path[:2])
    with pytest.raises(LocalProtocolError):
        MerkleTree(0)


def test_copy_is_independent() -> None:
    tree = MerkleTree.from_items(FLAT_LEAVES.items())
    twin = tree.copy()
    twin.set_item("z", 7)
    assert tree.root() == FLAT_ROOT
    assert twin.root() != FLAT_ROOT


stamps = st.builds(
    Timestamp,
    st.integers(0, 2**53),
    st.integers(0, 2**31 - 1),
    st.text(st.characters(exclude_characters=":"), min_size=1, max_size=4),
)


@pytest.mark.parametrize("vectorised", [True, False], ids=["numpy", "plain"])
@settings(max_examples=40)
@given(
    st.lists(st.tuples(keys, stamps), max_size=30),
    st.lists(st.tuples(keys, stamps), max_size=30),
    st.integers(1, 4),
)
def test_update_many_equals_updates_in_order(
    vectorised: bool,
    before: list[tuple[str, Timestamp]],
    batch: list[tuple[str, Timestamp]],
    depth: int,
) -> None:
    """Batch and one-by-one agree, including keys repeated in the batch and overwrites, with
    NumPy and without it (a base install hashes a batch key by key)."""
    was, hashing.VECTORISED = hashing.VECTORISED, vectorised
    try:
        _check_update_many(before, batch, depth)
    finally:
        hashing.VECTORISED = was


def _check_update_many(
    before: list[tuple[str, Timestamp]], batch: list[tuple[str, Timestamp]], depth: int
) -> None:
    one, many = MerkleTree(depth), MerkleTree(depth)
    for key, ts in before:
        one.update(key, ts)
        many.update(key, ts)
    for key, ts in batch:
        one.update(key, ts)
    many.update_many(batch)
    for key, ts in before[::2]:  # single writes after the batch see consistent node caches
        one.update(key, ts)
        many.update(key, ts)
    for key, _ in batch[::3]:
        one.remove(key)
        many.remove(key)
    assert dict(many.items()) == dict(one.items())
    assert many.root() == one.root()
    for level in range(depth):
        for idx in range(16**level):
            path = format(idx, f"0{level}x") if level else ""
            assert many.buckets(path) == one.buckets(path)
    # and both equal a tree built from scratch on the final items
    assert MerkleTree.from_items(one.items().items(), depth).root() == many.root()


@given(
    st.lists(st.tuples(st.text(max_size=6), st.integers(0, 2**32 - 1)), max_size=60),
    st.integers(1, 4),
)
def test_nodes_from_leaf_hashes_equal_the_tree(items: list[tuple[str, int]], depth: int) -> None:
    tree = MerkleTree.from_items(items, depth)
    last = dict(items)  # a later item for the same key replaces the earlier one, as in the tree
    leaves: dict[int, int] = {}
    indices = leaf_indices(fnv1a32_many(list(last)), depth).tolist()
    for idx, h in zip(indices, last.values(), strict=True):
        leaves[idx] = (leaves.get(idx, 0) + fmix32(h)) % 2**32
    assert tree.leaf_hashes() == {i: h for i, h in leaves.items() if h}
    nodes = nodes_from_leaves(leaves, depth)
    assert {node_path(level, idx): h for level, idx, h in nodes} == {
        path: tree.node_hash(path) for path in _all_paths(tree) if tree.node_hash(path)
    }
    assert (nodes[-1][:2] == (0, 0)) if nodes else tree.root() == 0
    assert all(h for _, _, h in nodes)


def _all_paths(tree: MerkleTree) -> list[str]:
    paths, frontier = [""], [""]
    for _ in range(tree.depth):
        frontier = [p + d for p in frontier for d in tree.buckets(p)]
        paths.extend(frontier)
    return paths
