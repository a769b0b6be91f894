"""Type-respecting keys: equal exactly when values are equal with the same types."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from octosync.dataspace import Record, _, capture, key, values_equal
from octosync.dataspace.oracle import canonical_text
from octosync.dataspace.values import checked_key, classof
from octosync.errors import InvalidValue
from tests.dataspace.helpers import SOME_VALUES


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, True),
        (1.0, True),
        (0, False),
        (Record("a", 1), Record("a", True)),
        (Record(1, "x"), Record(True, "x")),
        ([1], [1.0]),
        ({1: "x"}, {True: "x"}),
        ({"k": 1}, {"k": 1.0}),
        (capture(1), capture(True)),
        (_, capture()),
        ("a", b"a"),
        (None, _),
    ],
)
def test_python_equal_or_lookalike_values_have_different_keys(a: Any, b: Any) -> None:
    assert key(a) != key(b)
    assert not values_equal(a, b)
    table = {key(a): "a", key(b): "b"}
    assert table[key(a)] == "a"
    assert table[key(b)] == "b"


def test_records_are_hashable_and_compare_by_type() -> None:
    assert Record("p", 1) == Record("p", 1)
    assert Record("p", 1) != Record("p", True)
    assert len({Record("p", 1), Record("p", 1.0), Record("p", True), Record("p", 1)}) == 3
    assert classof(Record("p", 1, 2)) == classof(Record("p", "x", "y"))
    assert classof(Record("p", 1)) != classof(Record("p", 1, 2))


def test_nan_equals_nan_as_a_value() -> None:
    assert key(float("nan")) == key(float("nan"))
    assert values_equal([float("nan")], [float("nan")])


@given(SOME_VALUES, SOME_VALUES)
def test_key_equality_is_structural_typed_equality(a: Any, b: Any) -> None:
    same = values_equal(a, b)
    assert (key(a) == key(b)) is same
    assert (canonical_text(a) == canonical_text(b)) is same
    if same:
        assert hash(key(a)) == hash(key(b))


@given(SOME_VALUES)
def test_a_value_equals_itself(a: Any) -> None:
    assert values_equal(a, a)
    assert key(a) == key(a)


def test_unsupported_values_name_their_path() -> None:
    with pytest.raises(InvalidValue) as err:
        checked_key(Record("p", [1, {"k": (1, 2)}]))
    assert err.value.path == "$.fields[0][1]['k']"
    assert "tuple" in err.value.message
    with pytest.raises(InvalidValue) as err2:
        Record(object())
    assert err2.value.path == "label"
    assert err2.value.name == "InvalidValue"
    assert err2.value.code == 80
