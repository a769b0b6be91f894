"""RFC 7386 merge patch (the RFC's own examples) and the JSON tree check."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.chain.json_tree import check_json, merge_patch
from octosync.errors import DecodeError, LimitExceeded

RFC_EXAMPLES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC_EXAMPLES)
def test_rfc_7386_examples(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(json_values, json_values)
def test_merge_patch_does_not_modify_its_target(target: Any, patch: Any) -> None:
    import copy

    before = copy.deepcopy(target)
    merge_patch(target, patch)
    assert target == before


@given(json_values)
def test_patch_with_a_whole_object_without_nulls_is_idempotent(value: Any) -> None:
    once = merge_patch({"k": 1}, value)
    assert merge_patch(once, value) == once


def test_check_json_names_where_it_fails() -> None:
    check_json({"a": [1, 2.5, None, True, "s"]})
    with pytest.raises(DecodeError) as info:
        check_json({"a": [1, b"x"]})
    assert info.value.path == "$.a[1]"
    with pytest.raises(LimitExceeded, match="64-bit"):
        check_json([2**63])
    with pytest.raises(DecodeError, match="key 3"):
        check_json({"a": {3: 1}})
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(LimitExceeded):
        check_json(deep)
