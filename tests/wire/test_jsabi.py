from __future__ import annotations

import contextlib
import struct

import blake3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError, Oversize
from octosync.wire.jsabi import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    PacketDecoder,
    decode_packet,
    encode_packet,
)


def test_layout_is_magic_version_flags_length_payload_blake3() -> None:
    pkt = encode_packet(b"abc")
    assert pkt[:4] == b"JIT!"
    assert struct.unpack(">HHI", pkt[4:12]) == (1, 0, 3)
    assert pkt[12:15] == b"abc"
    assert pkt[15:] == blake3.blake3(pkt[:15]).digest()
    assert len(pkt) == 12 + 3 + 32
    assert MAX_PAYLOAD == 8 * 1024 * 1024


@pytest.mark.parametrize(
    ("offset", "value", "path"),
    [
        (0, b"JIT?", "magic"),
        (4, b"\x00\x02", "version"),
        (6, b"\x00\x01", "flags"),
        (15, b"\x00", "checksum"),
        (12, b"x", "checksum"),
    ],
)
def test_corruption_is_a_decode_error_naming_the_field(
    offset: int, value: bytes, path: str
) -> None:
    pkt = bytearray(encode_packet(b"abc"))
    pkt[offset : offset + len(value)] = value
    with pytest.raises(DecodeError) as err:
        decode_packet(bytes(pkt))
    assert err.value.path == path


def test_oversize_is_refused_from_the_header_alone() -> None:
    header = b"JIT!" + struct.pack(">HHI", 1, 0, MAX_PAYLOAD + 1)
    dec = PacketDecoder()
    with pytest.raises(Oversize):
        dec.feed(header)
    assert dec.buffered == 0
    with pytest.raises(DecodeError):
        dec.feed(encode_packet(b"ok"))  # framing is lost for good
    with pytest.raises(Oversize):
        encode_packet(b"x" * 11, max_payload=10)


@given(st.lists(st.binary(max_size=50), max_size=6), st.data())
def test_incremental_decoder_handles_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_packet(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = PacketDecoder()
    got: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got.extend(dec.feed(stream[prev:cut]))
        prev = cut
    assert got == payloads
    assert dec.buffered == 0


@given(st.binary(max_size=80))
def test_garbage_decodes_or_raises_a_typed_error(junk: bytes) -> None:
    dec = PacketDecoder(max_payload=64)
    with contextlib.suppress(DecodeError, Oversize):
        dec.feed(junk)
    with pytest.raises(DecodeError):
        decode_packet(junk[: HEADER_SIZE - 1])
