"""The Syndicate packet codec: round trips, strict refusals, and stream splitting."""

from __future__ import annotations

import preserves
import pytest
from hypothesis import given
from hypothesis import strategies as st
from preserves import Embedded, Record, Symbol

from octosync.errors import DecodeError, Oversize
from octosync.wire.syndicate import (
    Assert,
    Error,
    Extension,
    Message,
    Mine,
    Nop,
    Packet,
    PacketStream,
    PreDecoded,
    Retract,
    Sync,
    Turn,
    TurnEvent,
    Yours,
    decode_packet,
    encode_packet,
)

atoms = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.text(max_size=5).map(Symbol),
)
refs = st.one_of(
    st.integers(0, 2**40).map(Mine),
    st.builds(Yours, st.integers(0, 2**40), st.tuples()),
)
values = st.recursive(
    st.one_of(atoms, refs.map(Embedded)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.builds(
            lambda label, fs: Record(Symbol(label), fs),
            st.text(max_size=4),
            st.lists(inner, max_size=3),
        ),
        st.dictionaries(st.text(max_size=4), inner, max_size=3).map(preserves.ImmutableDict),
    ),
    max_leaves=12,
)
handles = st.integers(0, 2**53)
events = st.one_of(
    st.builds(Assert, values, handles),
    st.builds(Retract, handles),
    st.builds(Message, values),
    st.builds(Sync, refs),
)
packets: st.SearchStrategy[Packet] = st.one_of(
    st.lists(st.builds(TurnEvent, st.integers(0, 2**40), events), max_size=4).map(
        lambda es: Turn(tuple(es))
    ),
    st.builds(Error, st.text(max_size=10), values),
    st.just(Nop()),
    st.builds(
        Extension,
        st.text(max_size=4).filter(lambda t: t != "error").map(Symbol),
        st.lists(values, max_size=2).map(tuple),
    ),
)


@given(packets)
def test_packets_round_trip(packet: Packet) -> None:
    assert decode_packet(encode_packet(packet)) == packet


@given(st.lists(packets, min_size=1, max_size=5), st.data())
def test_a_stream_cut_anywhere_yields_the_same_packets(
    packets_: list[Packet], data: st.DataObject
) -> None:
    stream = b"".join(encode_packet(p) for p in packets_)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    splitter = PacketStream(1 << 20)
    frames: list[bytes] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        frames += splitter.feed(stream[last:cut])
        last = cut
    assert b"".join(frames) == stream
    assert all(type(f) is PreDecoded for f in frames)
    assert [decode_packet(f) for f in frames] == packets_


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (b"", "packet"),
        (bytes([0xB5, 0xB5]), "packet"),  # truncated
        (encode_packet(Nop()) + b"\x80", "packet"),  # trailing bytes
        (bytes([0xFF]), "packet"),  # not a tag
        (preserves.encode("just a string"), "packet"),
        (preserves.encode(((1, Record(Symbol("X"), [])),)), "turn[0]"),
        (preserves.encode((("one", Record(Symbol("R"), [1])),)), "turn[0].oid"),
        (preserves.encode(((1, Record(Symbol("R"), ["h"])),)), "turn[0].handle"),
        (preserves.encode(((-1, Record(Symbol("R"), [1])),)), "turn[0].oid"),
        (preserves.encode(((1, Record(Symbol("S"), [1])),)), "turn[0].peer"),
        (preserves.encode(((1, Record(Symbol("M"), [Embedded((2, 1))])),)), "ref"),
        (preserves.encode(((1, Record(Symbol("M"), [Embedded((0, "x"))])),)), "ref.oid"),
        (bytes([0xB5]) * 5000 + bytes([0x84]) * 5000, "packet"),  # nested past the stack
    ],
)
def test_bad_packets_are_refused_naming_the_field(data: bytes, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_packet(data)
    assert info.value.path == path


def test_an_incomplete_packet_past_the_limit_is_oversize() -> None:
    splitter = PacketStream(100)
    big = encode_packet(Turn((TurnEvent(1, Message("x" * 500)),)))
    assert splitter.feed(big[:90]) == []
    with pytest.raises(Oversize):
        splitter.feed(big[90:200])


def test_syndicate_py_double_embedded_sync_peer_is_one_ref() -> None:
    data = preserves.encode(((3, Record(Symbol("S"), [Embedded(Embedded((0, 9)))])),))
    assert decode_packet(data) == Turn((TurnEvent(3, Sync(Mine(9))),))
