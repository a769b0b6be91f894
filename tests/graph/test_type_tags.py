from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import TypeTagError
from octosync.graph.type_tags import TypeRegistry

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@given(
    st.sampled_from(["i32", "i64", "f64", "bool", "string", "bytes", "json"]).flatmap(
        lambda tag: st.tuples(
            st.just(tag),
            {
                "i32": st.integers(-(2**31), 2**31 - 1),
                "i64": st.integers(-(2**63), 2**63 - 1),
                "f64": st.floats(allow_nan=False),
                "bool": st.booleans(),
                "string": st.text(),
                "bytes": st.binary(),
                "json": json_values,
            }[tag],
        )
    )
)
def test_builtin_tags_round_trip(tag_value: tuple[str, object]) -> None:
    tag, value = tag_value
    reg = TypeRegistry()
    assert reg.decode(tag, reg.encode(tag, value)) == value


def test_out_of_range_and_wrong_types_are_typed_errors() -> None:
    reg = TypeRegistry()
    with pytest.raises(TypeTagError, match="i32"):
        reg.encode("i32", 2**31)
    with pytest.raises(TypeTagError, match="bool"):
        reg.encode("i64", True)
    with pytest.raises(TypeTagError, match="4 bytes"):
        reg.decode("i32", b"\x00")
    with pytest.raises(TypeTagError, match="unknown type tag"):
        reg.encode("nope", 1)


def test_user_tags_register_and_collisions_are_rejected() -> None:
    reg = TypeRegistry()
    reg.register(
        "point", lambda p: f"{p[0]},{p[1]}".encode(), lambda b: tuple(map(int, b.split(b",")))
    )
    assert reg.decode("point", reg.encode("point", (3, 4))) == (3, 4)
    with pytest.raises(TypeTagError, match="already registered"):
        reg.register("point", bytes, bytes)
    with pytest.raises(TypeTagError, match="already registered"):
        reg.register("i64", bytes, bytes)
