from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError, Forbidden, HandshakeFailed
from octosync.wire import json as seed_json
from octosync.wire import json_tagged, msgpack
from octosync.wire.lazily_dialects import (
    DIALECT_SET,
    SEED_JSON,
    handshake_dialect,
    sniff_producer_dialect,
)
from tests.e2e.helpers import handshake_struct


@given(st.binary(max_size=120) | st.text(max_size=60).map(str.encode))
def test_garbage_first_message_is_only_ever_a_decode_error(junk: bytes) -> None:
    with contextlib.suppress(DecodeError):
        handshake_dialect(junk)
    for dialect in DIALECT_SET.values():
        with contextlib.suppress(DecodeError):
            dialect.decode(junk)


@pytest.mark.parametrize(
    ("encoded", "name"),
    [
        (seed_json.encode_handshake(handshake_struct("s")), "json"),
        (json_tagged.encode_handshake(handshake_struct("s", codec="json_tagged")), "json_tagged"),
        (msgpack.encode_handshake(handshake_struct("s", codec="msgpack")), "msgpack"),
    ],
)
def test_the_handshake_codec_picks_the_dialect(encoded: bytes, name: str) -> None:
    dialect, hs = handshake_dialect(encoded)
    assert dialect.name == name
    assert hs.session_id == "s"


def test_codec_and_encoding_must_agree() -> None:
    wrong = seed_json.encode_handshake(handshake_struct("s", codec="msgpack"))
    with pytest.raises(DecodeError) as err:
        handshake_dialect(wrong)
    assert err.value.path == "codec"


def test_tagged_producer_is_sniffed_and_errors_keep_the_connection_encoding() -> None:
    tagged = b'{"Snapshot": {"epoch": 0, "nodes": [], "edges": []}}'
    assert sniff_producer_dialect(SEED_JSON, tagged).name == "json_tagged"
    assert sniff_producer_dialect(SEED_JSON, b'{"type":"snapshot","epoch":0}') is SEED_JSON
    err = Forbidden("no", path="ops[0]")
    assert (
        SEED_JSON.encode_error(err)
        == b'{"type":"error","code":"Forbidden","message":"no","path":"ops[0]"}'
    )
    packed = DIALECT_SET["msgpack"].encode_error(HandshakeFailed("x"))
    assert packed[:1] != b"{"
