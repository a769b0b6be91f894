"""Hashes against TopGun's published cross-language vectors (merkle_vectors.json, v1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.hashing import (
    combine,
    fmix32,
    fmix32_many,
    fnv1a32,
    fnv1a32_many,
    lww_item_hash,
)

# (key, millis, counter, nodeId, expected): TopGun core-rust/tests/fixtures/merkle_vectors.json
LWW_LEAF_VECTORS = [
    ("user:1", 1700000000000, 0, "node-a", 1592194921),
    ("todo:42", 1700000000123, 17, "client-7f3a", 990770736),
    ("ключ-😀-鍵", 1700000000999, 1, "nœud-🚀", 2250959895),
    ("epoch", 0, 0, "n", 4016903966),
]


@pytest.mark.parametrize(("key", "millis", "counter", "node", "expected"), LWW_LEAF_VECTORS)
def test_lww_item_hash_matches_topgun(
    key: str, millis: int, counter: int, node: str, expected: int
) -> None:
    assert lww_item_hash(key, millis, counter, node) == expected


def test_fnv_known_values() -> None:
    # FNV-1a-32 reference values: "" is the offset basis, "a" and "foobar" are the FNV test suite.
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C
    assert fnv1a32("foobar") == 0xBF9CF968


def utf16_reference(text: str, h: int = 0x811C9DC5) -> int:
    """Straight from the definition: code units via explicit surrogate splitting."""
    for ch in text:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + (cp & 0x3FF)]
        for u in units:
            h = ((h ^ u) * 0x01000193) % 2**32
    return h


# Text with lone surrogates too: JavaScript strings may hold them and charCodeAt yields them.
any_text = st.text(st.characters(min_codepoint=0), max_size=20) | st.lists(
    st.sampled_from(["a", "é", "😀", "\ud800", "\udfff", "鍵"]), max_size=8
).map("".join)


@given(any_text)
def test_fnv_iterates_utf16_code_units(text: str) -> None:
    assert fnv1a32(text) == utf16_reference(text)


@given(st.lists(st.tuples(any_text, st.integers(0, 2**32 - 1)), max_size=12), st.booleans())
def test_fnv_many_equals_the_definition_per_text(
    texts_and_seeds: list[tuple[str, int]], seeded: bool
) -> None:
    texts = [t for t, _ in texts_and_seeds]
    seeds = [s for _, s in texts_and_seeds] if seeded else [0x811C9DC5] * len(texts)
    got = fnv1a32_many(texts, np.array(seeds, np.uint32) if seeded else None)
    assert got.tolist() == [utf16_reference(t, s) for t, s in zip(texts, seeds, strict=True)]
    assert fmix32_many(got).tolist() == [fmix32(h) for h in got.tolist()]


def test_fmix_zero_is_neutral_and_combine_is_order_free() -> None:
    assert fmix32(0) == 0
    assert combine([]) == 0
    assert combine([5, 0]) == combine([5]) == fmix32(5)
    assert combine([1, 2, 3]) == combine([3, 1, 2])
    # Raw sums that collide do not collide once mixed.
    assert combine([100, 200]) != combine([250, 50])
