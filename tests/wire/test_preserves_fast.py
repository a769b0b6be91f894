"""The fast Preserves codec against the ``preserves`` package, byte for byte and value for
value, on generated values, their truncations and arbitrary bytes."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from preserves import Embedded, ImmutableDict, Record, Symbol
from preserves.binary import Decoder, Encoder

from octosync.wire import preserves_fast
from octosync.wire.syndicate import Mine, Yours, decode_wire_ref, encode_wire_ref


def package_encode(v: Any) -> bytes:
    encoder = Encoder(encode_embedded=encode_wire_ref)
    encoder.append(v)
    return bytes(encoder.buffer)


def package_decode(data: bytes) -> tuple[str, Any]:
    decoder = Decoder(data, decode_embedded=decode_wire_ref)
    try:
        value = decoder.try_next()
    except Exception as exc:
        return "error", type(exc).__name__
    return ("short", None) if value is None else ("value", (package_encode(value), decoder.index))


def fast_decode(data: bytes) -> tuple[str, Any]:
    try:
        got = preserves_fast.decode_from(data, 0, decode_wire_ref)
    except Exception as exc:
        return "error", type(exc).__name__
    return ("short", None) if got is None else ("value", (package_encode(got[0]), got[1]))


atoms = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**130), max_value=2**130),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.builds(Symbol, st.text(max_size=10)),
    st.builds(lambda oid: Embedded(Mine(oid)), st.integers(0, 2**40)),
    st.builds(lambda oid: Embedded(Yours(oid)), st.integers(0, 2**40)),
)


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    hashable = st.one_of(st.integers(), st.text(max_size=5), st.builds(Symbol, st.text(max_size=5)))
    return st.one_of(
        st.lists(children, max_size=5).map(tuple),
        st.lists(children, max_size=5),
        st.builds(
            lambda label, fields: Record(label, fields), children, st.lists(children, max_size=4)
        ),
        st.frozensets(hashable, max_size=4),
        st.dictionaries(hashable, children, max_size=4).map(ImmutableDict),
    )


values = st.recursive(atoms, _compound, max_leaves=30)


@settings(max_examples=400)
@given(values)
def test_encode_writes_the_packages_bytes(v: Any) -> None:
    assert preserves_fast.encode(v, encode_wire_ref) == package_encode(v)


@settings(max_examples=400)
@given(values)
def test_decode_reads_the_packages_values(v: Any) -> None:
    data = package_encode(v)
    got = preserves_fast.decode_from(data, 0, decode_wire_ref)
    assert got is not None
    value, end = got
    assert end == len(data)
    expected = Decoder(data, decode_embedded=decode_wire_ref).next()
    # a set decoded from the same bytes iterates alike, so it re-encodes alike
    assert package_encode(value) == package_encode(expected)
    if not (isinstance(v, float) and math.isnan(v)):
        assert value == expected


@given(values, st.data())
def test_every_truncation_is_short_in_both(v: Any, data: st.DataObject) -> None:
    encoded = package_encode(v)
    cut = data.draw(st.integers(0, max(0, len(encoded) - 1)))
    assert fast_decode(encoded[:cut]) == package_decode(encoded[:cut]) == ("short", None)


@settings(max_examples=1000)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_fail_alike(data: bytes) -> None:
    ours, theirs = fast_decode(data), package_decode(data)
    if theirs[0] == "error":
        assert ours[0] == "error"
    else:
        assert ours == theirs


def test_a_value_after_annotations_and_in_the_middle_of_a_buffer() -> None:
    annotated = b"\x85\xb3\x01x\xb0\x01\x07"  # @x 7
    assert preserves_fast.decode_from(annotated) == (7, len(annotated))
    two = package_encode(1) + package_encode(Symbol("two"))
    first = preserves_fast.decode_from(two)
    assert first is not None
    assert preserves_fast.decode_from(two, first[1]) == (Symbol("two"), len(two))


def test_decoded_symbols_are_cached_up_to_a_bound() -> None:
    many = tuple(Symbol(f"s{i}") for i in range(preserves_fast._SYMBOLS_MAX + 100))
    got = preserves_fast.decode_from(package_encode(many))
    assert got is not None
    assert got[0] == many
    assert len(preserves_fast._SYMBOLS) == preserves_fast._SYMBOLS_MAX
    again = preserves_fast.decode_from(package_encode((Symbol("s0"), Symbol("s0"))))
    assert again is not None
    assert again[0][0] is again[0][1]  # one object for a symbol seen before
