"""Preserves values <-> dataspace values, and dataspacePatterns -> dataspace patterns."""

from __future__ import annotations

import preserves
import pytest
from hypothesis import given

from octosync.dataspace import analyse, match
from octosync.dataspace.values import Capture, Record, Symbol, _, key
from octosync.errors import InvalidPattern, InvalidValue
from octosync.syndicate.values import Ref, from_wire, pattern_of, to_wire
from tests.syndicate.helpers import bind, discard, group_rec, lit, rec, sym
from tests.wire.test_syndicate import values

REFS: dict[object, Ref] = {}


def ref_in(wire: object) -> Ref:
    return REFS.setdefault(wire, Ref(("entity", wire)))


def ref_out(ref: Ref) -> object:
    return ref.entity[1]  # type: ignore[index]


@given(values)
def test_values_round_trip_and_key(v: object) -> None:
    local = from_wire(v, ref_in)
    key(local)  # every translated value is one the index accepts
    assert to_wire(local, ref_out) == v


def test_symbols_and_strings_stay_distinct() -> None:
    assert key(from_wire(preserves.Symbol("a"), ref_in)) != key(from_wire("a", ref_in))
    assert from_wire(preserves.Symbol("a"), ref_in) == Symbol("a")


def test_a_sequence_as_a_dict_key_is_refused() -> None:
    with pytest.raises((InvalidValue, TypeError)):
        from_wire(preserves.ImmutableDict({(1, 2): 3}), ref_in)


def local(p: object) -> object:
    return from_wire(p, ref_in)


def test_patterns_translate_with_arity_from_the_last_entry() -> None:
    p = pattern_of(local(group_rec(sym("Point"), bind(), lit(1), discard())))
    assert type(p) is Record
    assert p.label == Symbol("Point")
    assert len(p.fields) == 3
    assert match(p, Record(Symbol("Point"), "x", 1, "z")) == ("x",)
    assert match(p, Record(Symbol("Point"), "x", 2, "z")) is None
    sparse = pattern_of(local(rec("group", rec("rec", sym("P")), {2: bind()})))
    assert match(sparse, Record(Symbol("P"), 1, 2, 3)) == (3,)
    arr = pattern_of(local(rec("group", rec("arr"), {0: bind(lit("k"))})))
    assert match(arr, ["k"]) == ("k",)
    d = pattern_of(local(rec("group", rec("dict"), {"a": bind()})))
    assert match(d, {"a": 5}) == (5,)
    analyse(d)
    assert pattern_of(local(discard())) is _
    assert type(pattern_of(local(bind()))) is Capture


@pytest.mark.parametrize(
    "bad",
    [
        "not a record",
        rec("nope"),
        rec("lit", (1, 2)),
        rec("group", rec("rec", sym("P")), {"x": discard()}),
        rec("group", rec("set"), {}),
        rec("bind"),
    ],
)
def test_bad_patterns_are_refused(bad: object) -> None:
    with pytest.raises(InvalidPattern):
        pattern_of(local(bad))
