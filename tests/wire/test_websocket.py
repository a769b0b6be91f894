"""Server frames and permessage-deflate: what a client's inflater gets back, and which offers
the server takes."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from octosync.wire.websocket import FrameDeflater, accepts_deflate, ws_frame

TAIL = b"\x00\x00\xff\xff"


def parse(frame: bytes) -> tuple[int, bytes]:
    """(first byte, payload) of one unmasked frame, checking its length field."""
    n, at = frame[1], 2
    assert not n & 0x80
    if n == 126:
        n, at = int.from_bytes(frame[2:4], "big"), 4
        assert n >= 126
    elif n == 127:
        n, at = int.from_bytes(frame[2:10], "big"), 10
        assert n >= 1 << 16
    assert len(frame) == at + n
    return frame[0], frame[at:]


@given(st.lists(st.binary(max_size=70_000), min_size=1, max_size=6))
def test_each_compressed_frame_inflates_alone_and_in_sequence(payloads: list[bytes]) -> None:
    deflater = FrameDeflater()
    stream = zlib.decompressobj(-15)  # a client keeping one inflater, as most do
    for payload in payloads:
        first, body = parse(deflater.frame(payload))
        assert first == 0x80 | 0x40 | 0x2  # FIN, RSV1 (compressed), binary
        assert zlib.decompressobj(-15).decompress(body + TAIL) == payload
        assert stream.decompress(body + TAIL) == payload


@given(st.binary(max_size=70_000), st.booleans())
def test_plain_frames_carry_the_payload_as_it_is(payload: bytes, text: bool) -> None:
    first, body = parse(ws_frame(payload, text=text))
    assert (first, body) == (0x80 | (0x1 if text else 0x2), payload)


def test_the_offers_the_server_takes() -> None:
    taken = [
        "permessage-deflate",
        "permessage-deflate; client_max_window_bits",
        "permessage-deflate; client_max_window_bits=10; server_no_context_takeover",
        "permessage-deflate; server_max_window_bits=15",
        'permessage-deflate; client_max_window_bits="12"',
        "x-webkit-deflate-frame, permessage-deflate; client_no_context_takeover",
        "permessage-deflate; server_max_window_bits=10, permessage-deflate",
    ]
    refused = [
        None,
        "",
        "x-webkit-deflate-frame",
        "permessage-deflate; server_max_window_bits=10",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; client_max_window_bits=7",
        "permessage-deflate; unknown_param",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; server_no_context_takeover=1",
    ]
    assert [o for o in taken if not accepts_deflate(o)] == []
    assert [o for o in refused if accepts_deflate(o)] == []


@given(st.text(max_size=200))
def test_an_offer_is_taken_only_when_it_names_permessage_deflate(offer: str) -> None:
    if accepts_deflate(offer):
        assert "permessage-deflate" in offer.lower()
