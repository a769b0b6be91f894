"""Whole numbers as JavaScript peers send them: msgspec checks them as it decodes.

Each property runs through a real decoder: a Struct of its own for the type alone, and
TopGun's ``decode`` for the fields its messages declare (the path the error names is the one a
peer reads).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.bounds import MAX_HLC_COUNTER, MAX_SAFE_INTEGER
from octosync.crdt.op import OpRecord
from octosync.crdt.sync_messages import TopGunStruct
from octosync.errors import DecodeError
from octosync.js_numbers import MAX_HASH32, JsCounter, JsHash32, JsUint, int_coercions
from octosync.wire import topgun, topgun_http, topgun_requests, topgun_services
from octosync.wire.topgun import ClientOpMessage, client_op_to_record, decode

BOUNDS = {"uint": MAX_SAFE_INTEGER, "counter": MAX_HLC_COUNTER, "hash32": MAX_HASH32}


class Numbers(TopGunStruct, frozen=True):
    uint: JsUint | None = None
    counter: JsCounter | None = None
    hash32: JsHash32 | None = None


class Tallies(TopGunStruct, frozen=True):
    tallies: dict[str, JsUint]
    items: list[JsUint] | None = None


class Checked(TopGunStruct, frozen=True):
    """A class with its own ``__post_init__``: it runs after the conversion, and sees ints."""

    seen: ClassVar[list[Any]] = []
    n: JsUint

    def __post_init__(self) -> None:
        Checked.seen.append(self.n)


class Inherits(Checked, frozen=True):
    m: JsUint = 0


def decoded(cls: type, doc: dict[str, Any]) -> Any:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(doc), type=cls)


def refused(cls: type, doc: dict[str, Any]) -> str:
    """The path msgspec names for ``doc``, which it must refuse."""
    with pytest.raises(msgspec.ValidationError) as info:
        decoded(cls, doc)
    return str(info.value).rsplit(" - at `$.", 1)[1].rstrip("`")


field = st.sampled_from(sorted(BOUNDS))


@given(field, st.data())
def test_any_whole_number_in_range_decodes_as_that_int_and_round_trips(
    name: str, data: st.DataObject
) -> None:
    n = data.draw(st.integers(0, BOUNDS[name]))
    for sent in (n, float(n)) if float(n) == n else (n,):  # as msgpackr sends it, or as int
        got = decoded(Numbers, {name: sent})
        assert type(getattr(got, name)) is int
        assert getattr(got, name) == n
        assert decoded(Numbers, msgspec.to_builtins(got)) == got
        assert msgspec.msgpack.encode(got) == msgspec.msgpack.encode({name: n})


fractions = st.tuples(st.integers(-(2**40), 2**40), st.floats(0.001, 0.999)).map(sum) | st.floats(
    allow_nan=False, allow_infinity=False
).filter(lambda x: x % 1 != 0)


@given(field, fractions)
def test_a_fraction_is_refused_naming_the_field(name: str, x: float) -> None:
    assert refused(Numbers, {name: x}) == name


@given(field, st.sampled_from([math.nan, math.inf, -math.inf, True, False, "1", [1], None]))
def test_nan_infinities_bools_and_other_types_are_refused(name: str, bad: Any) -> None:
    if bad is None:  # these fields are optional: None is absent
        assert getattr(decoded(Numbers, {name: bad}), name) is None
        return
    assert refused(Numbers, {name: bad}) == name


@given(field, st.data())
def test_out_of_range_is_refused_as_int_and_as_float(name: str, data: st.DataObject) -> None:
    above = data.draw(st.integers(BOUNDS[name] + 1, 2**64 - 1))
    below = data.draw(st.integers(-(2**63), -1))
    for bad in (above, below, float(above), float(below)):
        if float(bad) == BOUNDS[name]:  # above rounded down to the bound: in range
            continue
        assert refused(Numbers, {name: bad}) == name


@given(
    st.dictionaries(
        st.text(max_size=3), st.integers(0, 2**40).map(lambda n: float(n)) | st.integers(0, 9)
    ),
    st.lists(st.integers(0, 2**40).map(float), max_size=3),
)
def test_containers_of_whole_numbers_hold_ints(tallies: dict[str, Any], items: list[Any]) -> None:
    got = decoded(Tallies, {"tallies": tallies, "items": items})
    assert got.tallies == tallies
    assert all(type(v) is int for v in got.tallies.values())
    assert got.items is not None
    assert all(type(v) is int for v in got.items)
    assert got.items == items


def test_containers_name_the_field_they_refuse() -> None:
    assert refused(Tallies, {"tallies": {"a": 1.5}}) == "tallies[...]"
    assert refused(Tallies, {"tallies": {}, "items": [1, 2**53 + 2]}) == "items[1]"


def test_a_class_own_post_init_runs_after_the_conversion_and_is_inherited() -> None:
    Checked.seen.clear()
    assert decoded(Checked, {"n": 7.0}) == Checked(7)
    got = decoded(Inherits, {"n": 8.0, "m": 9.0})
    assert (got.n, got.m) == (8, 9)
    assert type(got.m) is int
    assert Checked.seen == [7, 7, 8]  # the decode and the construction compared, then Inherits
    assert all(type(n) is int for n in Checked.seen)


def test_fields_are_found_from_their_types() -> None:
    assert int_coercions(Numbers)[0] == ("uint", "counter", "hash32")
    assert [name for name, _ in int_coercions(Tallies)[1]] == ["tallies", "items"]
    assert int_coercions(Inherits)[0] == ("n", "m")
    assert int_coercions(topgun.CounterState)[0] == ()
    assert [n for n, _ in int_coercions(topgun.CounterState)[1]] == [
        "positive",
        "negative",
        "p",
        "n",
    ]


def test_a_field_that_could_hold_whole_numbers_two_ways_is_refused_when_declared() -> None:
    with pytest.raises(TypeError, match="one kind"):

        class Ambiguous(TopGunStruct, frozen=True):
            n: JsUint | list[JsUint]


def _structs() -> list[type]:
    found = []
    for module in (topgun, topgun_http, topgun_requests, topgun_services):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, TopGunStruct):
                found.append(value)
    return found


@pytest.mark.parametrize("cls", _structs(), ids=lambda c: c.__name__)
def test_no_topgun_field_takes_an_unchecked_float(cls: type) -> None:
    """A number field is an int, a whole number (checked at decode) or a plain float (a
    score); never ``int | float``, which would let a fraction through unchecked."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)

    def walk(t: msgspec.inspect.Type) -> None:
        if isinstance(t, msgspec.inspect.UnionType):
            floats = [a for a in t.types if isinstance(a, msgspec.inspect.FloatType)]
            ints = [a for a in t.types if isinstance(a, msgspec.inspect.IntType)]
            for f in floats:
                if ints:
                    assert f.multiple_of == 1, f"{cls.__name__}: a fraction passes"
                    assert (f.ge, f.le) == (ints[0].ge, ints[0].le)
            for a in t.types:
                walk(a)
        elif isinstance(t, msgspec.inspect.DictType):
            walk(t.value_type)
        elif isinstance(t, msgspec.inspect.ListType):
            walk(t.item_type)

    for f in info.fields:
        walk(f.type)


def client_op(millis: Any, counter: Any) -> bytes:
    stamp = {"millis": millis, "counter": counter, "nodeId": "n"}
    record = {"value": 1, "timestamp": stamp}
    return msgspec.msgpack.encode(
        {"type": "CLIENT_OP", "payload": {"mapName": "m", "key": "k", "record": record}}
    )


numbers = (
    st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.integers(0, 2**60).map(float)
    | st.booleans()
)


@given(numbers, numbers)
def test_a_timestamp_decodes_only_if_its_journal_record_reads_back(
    millis: Any, counter: Any
) -> None:
    """What the wire accepts, a journal record holds: a counter past 2^31 - 1 or millis past
    2^53 is refused as the frame decodes, naming the frame's field, not left to the journal's
    record check, which names the record's."""
    try:
        op = decode(client_op(millis, counter))
    except DecodeError as err:
        refused_at = err.path
    else:
        refused_at = None
    if refused_at is not None:
        assert refused_at in {"payload.record.timestamp.millis", "payload.record.timestamp.counter"}
        return
    assert isinstance(op, ClientOpMessage)
    record = client_op_to_record(op.payload)
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=OpRecord)
    assert (back.ts.millis, back.ts.counter) == (millis, counter)
    assert back.op_id == f"{int(millis)}:{int(counter)}:n"


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"type": "PING", "timestamp": 2**53 + 1}, "timestamp"),
        ({"type": "PING", "timestamp": math.nan}, "timestamp"),
        ({"type": "PING", "timestamp": True}, "timestamp"),
        ({"type": "SYNC_INIT", "mapName": "m", "rootHash": 2.0**32}, "rootHash"),
        ({"type": "SYNC_INIT", "mapName": "m", "rootHash": 7.5}, "rootHash"),
        (
            {"type": "COUNTER_SYNC", "payload": {"name": "c", "state": {"p": {"a": 2**53 + 1}}}},
            "payload.state.p[...]",
        ),
        (
            {
                "type": "VECTOR_SEARCH",
                "payload": {"id": "q", "mapName": "m", "queryVector": b"\0" * 4, "k": -1.0},
            },
            "payload.k",
        ),
    ],
)
def test_topgun_names_the_field_of_a_bad_number(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(msgspec.msgpack.encode(doc))
    assert info.value.path == path
    assert info.value.code == DecodeError.code
