"""The driver's half of the tree: partial leaf sums in, every node out (no Spark needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests.pipeline.helpers import fmix32, fnv1a32_utf16, reference_tree

from octosync.crdt.merkle import MerkleTree
from octosync.pipeline.transforms.merkle import merkle_roots, tree_table


@given(
    st.dictionaries(
        st.sampled_from("mn"),
        st.lists(st.tuples(st.text(max_size=5), st.integers(0, 2**32 - 1)), max_size=40),
        max_size=2,
    ),
    st.integers(1, 3),
)
def test_tree_from_split_leaves_matches_the_reference_and_the_crdt_tree(
    items: dict[str, list[tuple[str, int]]], parts: int
) -> None:
    leaves = []
    for name, entries in items.items():
        unique = dict(entries)
        for i, (key, entry) in enumerate(unique.items()):  # spread keys over ``parts`` shares
            leaves.append((name, fnv1a32_utf16(key) >> 20, fmix32(entry), i % parts))
    tree = tree_table((m, leaf, h) for m, leaf, h, _ in leaves)
    got: dict[str, dict[str, int]] = {}
    for m, path, h in zip(
        *(tree.column(c).to_pylist() for c in ("map", "path", "hash")), strict=True
    ):
        got.setdefault(m, {})[path] = h
    for name, entries in items.items():
        unique = list(dict(entries).items())
        assert got.get(name, {}) == reference_tree(unique)
        assert merkle_roots(tree).get(name, 0) == MerkleTree.from_items(unique).root()
