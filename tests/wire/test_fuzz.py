"""Fuzz: arbitrary bytes and mutated valid frames either decode or raise ``DecodeError``.

Nothing else may escape a decoder, and whatever decodes is a valid message: it re-encodes,
and a Mirror fed with it answers (Applied, Ignored or a ResyncRequest) instead of crashing.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.ipc.messages import ResyncRequest
from octosync.ipc.mirror import Applied, Ignored, Mirror
from octosync.wire import json as seed_json
from octosync.wire import json_tagged, msgpack
from tests.strategies import handshakes, ipc_messages, snapshots

DIALECTS = [seed_json, json_tagged, msgpack]


def decode_or_decode_error(mod: ModuleType, data: bytes) -> None:
    path: str | None = None
    try:
        message = mod.decode(data)
    except DecodeError as exc:
        path = exc.path or "missing"
    if path is not None:
        assert path.startswith("$")
        return
    assert mod.decode(mod.encode(message)) is not None
    mirror = Mirror()
    result = mirror.apply(message)
    assert isinstance(result, Applied | Ignored | ResyncRequest)


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "digit"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 4))]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "digit" and data:
            data[pos] = draw(st.sampled_from(b'-9.e0"{}[]'))
    return bytes(data)


@pytest.mark.parametrize("mod", DIALECTS, ids=lambda m: m.__name__)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes(mod: ModuleType, data: bytes) -> None:
    decode_or_decode_error(mod, data)


@pytest.mark.parametrize("mod", DIALECTS, ids=lambda m: m.__name__)
@settings(max_examples=100)
@given(data=st.data())
def test_mutated_valid_frames(mod: ModuleType, data: st.DataObject) -> None:
    raw = mod.encode(data.draw(ipc_messages()))
    decode_or_decode_error(mod, data.draw(mutated(raw)))


@pytest.mark.parametrize("mod", DIALECTS, ids=lambda m: m.__name__)
@given(data=st.data())
def test_mutated_handshakes(mod: ModuleType, data: st.DataObject) -> None:
    raw = data.draw(mutated(mod.encode_handshake(data.draw(handshakes))))
    path: str | None = "decoded"
    try:
        mod.decode_handshake(raw)
    except DecodeError as exc:
        path = exc.path
    assert path is not None


@given(data=st.data())
def test_mirror_survives_mutated_deltas_after_a_snapshot(data: st.DataObject) -> None:
    mirror = Mirror()
    snap = data.draw(snapshots())
    mirror.apply(snap)
    for _ in range(3):
        raw = data.draw(mutated(seed_json.encode(data.draw(ipc_messages()))))
        try:
            message = seed_json.decode(raw)
        except DecodeError:
            continue
        assert isinstance(mirror.apply(message), Applied | Ignored | ResyncRequest)


def test_deeply_nested_input_is_a_decode_error() -> None:
    for mod, data in (
        (seed_json, b"[" * 100_000),
        (json_tagged, b'{"Delta":' * 50_000),
        (msgpack, b"\x91" * 100_000),
    ):
        with pytest.raises(DecodeError):
            mod.decode(data)
