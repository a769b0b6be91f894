"""The y-protocols framing: lib0 var uints and every message of both protocols round-trip;
anything else is ``MalformedYjsMessage`` (never another exception)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import MalformedYjsMessage
from octosync.yjs import messages as m
from octosync.yjs.encoding import MAX_VAR_UINT, Reader, write_var_string, write_var_uint

uints = st.integers(min_value=0, max_value=MAX_VAR_UINT)


@given(uints)
def test_var_uint_round_trips(value: int) -> None:
    out = bytearray()
    write_var_uint(out, value)
    reader = Reader(bytes(out))
    assert reader.var_uint("$") == value
    assert reader.done


def test_var_uint_is_lib0s_encoding() -> None:
    """Fixed points from lib0: 7 bits a byte, low bits first, the high bit continues."""
    for value, encoded in ((0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")):
        out = bytearray()
        write_var_uint(out, value)
        assert bytes(out) == encoded


def test_a_number_past_2_53_is_refused() -> None:
    with pytest.raises(MalformedYjsMessage):
        Reader(b"\xff" * 8 + b"\x7f").var_uint("$.n")


def addressed(address: str, body: bytes) -> bytes:
    out = bytearray()
    write_var_string(out, address)
    return bytes(out) + body


@given(st.binary(max_size=64))
def test_sync_messages_round_trip_on_both_protocols(payload: bytes) -> None:
    for body, expected in (
        (m.sync_step1(payload), m.SyncStep1(payload)),
        (m.sync_step2(payload), m.SyncStep2(payload)),
        (m.sync_update(payload), m.SyncUpdate(payload)),
        (m.awareness(payload), m.AwarenessUpdate(payload)),
    ):
        assert m.decode_y_websocket(body) == expected
        assert m.decode_hocuspocus(addressed("doc\0s", body)) == m.Addressed("doc\0s", expected)
    assert m.decode_hocuspocus(addressed("doc\0s", m.sync_step1(b""))).document == "doc"


def test_hocuspocus_messages() -> None:
    token = bytearray((m.AUTH, m.AUTH_TOKEN))
    write_var_string(token, "jwt")
    assert m.decode_hocuspocus(addressed("d", bytes(token))).message == m.AuthToken("jwt")
    write_var_string(token, "4.8.0")
    assert m.decode_hocuspocus(addressed("d", bytes(token))).message == m.AuthToken("jwt", "4.8.0")
    assert m.decode_hocuspocus(addressed("d", m.stateless("hi"))).message == m.Stateless("hi")
    assert m.decode_hocuspocus(addressed("d", b"\x07")).message == m.CloseDocument()
    reply = bytes((m.SYNC_REPLY,)) + m.sync_step1(b"\x00")[1:]
    assert m.decode_hocuspocus(addressed("d", reply)).message == m.SyncStep1(b"\x00", False)


@pytest.mark.parametrize(
    "body",
    [
        b"",  # no type
        b"\x09",  # unknown type
        b"\x02\x00\x00",  # y-websocket's auth: the server's to send, not a client's
        b"\x05\x00",  # Hocuspocus's stateless on y-websocket
        b"\x00\x03\x00",  # unknown sync sub-type
        b"\x00\x01\x05ab",  # update shorter than announced
        b"\x00\x01\x00\x00",  # a byte after the message
        b"\x03\x00",  # query awareness with a trailing byte
    ],
)
def test_y_websocket_refuses_what_it_does_not_define(body: bytes) -> None:
    with pytest.raises(MalformedYjsMessage):
        m.decode_y_websocket(body)


@pytest.mark.parametrize("body", [b"\x06\x00", b"\x08\x01", b"\x02\x01\x00", b"\x0a"])
def test_hocuspocus_refuses_the_servers_own_messages(body: bytes) -> None:
    """Broadcast-stateless, sync status, a denial and pong are not a client's to send."""
    with pytest.raises(MalformedYjsMessage):
        m.decode_hocuspocus(addressed("d", body))


@given(st.binary(max_size=40))
def test_any_bytes_decode_or_are_malformed(data: bytes) -> None:
    for decode in (m.decode_y_websocket, m.decode_hocuspocus):
        path = None
        try:
            decode(data)
        except MalformedYjsMessage as err:
            path = err.path or ""
        assert path is None or path.startswith("$")
