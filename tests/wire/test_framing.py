"""u32 length-prefix framing: any split of the byte stream yields the same frames; oversize
frames are refused at their header."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError, LocalProtocolError, Oversize
from octosync.wire.framing import FrameDecoder, encode_frame


def test_encode_frame_layout() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(bytearray(b"x"), max_frame_size=1) == b"\x00\x00\x00\x01x"
    with pytest.raises(Oversize) as info:
        encode_frame(b"ab", max_frame_size=1)
    assert info.value.path == "length"


@given(
    st.lists(st.binary(max_size=300), max_size=12),
    st.lists(st.integers(0, 4000), max_size=20),
)
def test_any_split_yields_the_frames_in_order(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    dec = FrameDecoder(max_frame_size=300)
    got: list[bytes] = []
    for a, b in itertools.pairwise(points):
        got += dec.feed(memoryview(stream)[a:b])
        assert dec.buffered <= 4 + 300
    assert got == frames
    assert dec.buffered == 0
    dec.close()


def test_oversize_is_refused_at_the_header_before_any_payload() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    assert dec.feed(encode_frame(b"ok")) == [b"ok"]
    assert dec.feed(b"\x00\x00") == []
    with pytest.raises(Oversize) as info:
        dec.feed(b"\x04\x01")  # declares 1025 bytes; none of them has arrived
    assert info.value.path == "length"
    assert info.value.name == "Oversize"
    assert dec.buffered == 0
    with pytest.raises(Oversize):  # framing is lost: the stream stays refused
        dec.feed(encode_frame(b"ok"))


def test_oversize_frame_inside_a_big_chunk_is_not_retained() -> None:
    dec = FrameDecoder(max_frame_size=10)
    chunk = encode_frame(b"a") + b"\x00\x00\x10\x00" + bytes(5000)
    with pytest.raises(Oversize):
        dec.feed(chunk)
    assert dec.buffered == 0


def test_frame_exactly_at_the_limit_passes() -> None:
    dec = FrameDecoder(max_frame_size=3)
    assert dec.feed(encode_frame(b"abc") + encode_frame(b"")) == [b"abc", b""]


def test_limit_can_be_renegotiated_but_must_be_positive() -> None:
    dec = FrameDecoder(max_frame_size=2**32 - 1)
    dec.max_frame_size = 2
    with pytest.raises(Oversize):
        dec.feed(encode_frame(b"abc"))
    for bad in (0, -1, 2**32):
        with pytest.raises(LocalProtocolError):
            FrameDecoder(max_frame_size=bad)


def test_close_inside_a_frame_is_a_decode_error() -> None:
    dec = FrameDecoder(max_frame_size=100)
    dec.feed(encode_frame(b"hello")[:6])
    with pytest.raises(DecodeError) as info:
        dec.close()
    assert info.value.path == "frame"
