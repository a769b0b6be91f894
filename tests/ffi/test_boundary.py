"""The ABI's behaviour in Python: every message round-trips through a frame as canonical JSON,
and no input makes it raise."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.ffi.boundary import Kind, MirrorHandle, Status, canonical, frame_decode, frame_encode
from octosync.ipc.messages import IpcMessage
from octosync.wire import json as seed_json
from octosync.wire import json_tagged
from tests.strategies import ipc_messages


@given(ipc_messages(tagged=True))
def test_a_message_survives_encode_then_decode_as_canonical_json(message: IpcMessage) -> None:
    tagged = json_tagged.encode(message)
    status, kind, frame = frame_encode(tagged)
    assert status is Status.OK
    assert kind is not Kind.UNKNOWN
    status, kind_back, body = frame_decode(frame)
    assert (status, kind_back) == (Status.OK, kind)
    assert body == tagged
    assert json_tagged.decode(body) == message


@given(ipc_messages(tagged=True))
def test_both_json_forms_give_the_same_bytes(message: IpcMessage) -> None:
    assert canonical(seed_json.encode(message))[2] == canonical(json_tagged.encode(message))[2]


@given(st.binary(max_size=200))
def test_any_bytes_get_a_status_never_an_exception(data: bytes) -> None:
    for fn in (canonical, frame_encode, frame_decode, MirrorHandle().apply):
        status, _kind, out = fn(data)
        assert status in (Status.OK, Status.EMPTY, Status.INVALID_MESSAGE)
        assert (status is Status.OK) or out == b""


def test_empty_and_truncated() -> None:
    assert frame_decode(b"")[0] is Status.EMPTY
    assert frame_decode(b"\x00\x00")[0] is Status.INVALID_MESSAGE
    good = frame_encode(b'{"Delta":{"base_epoch":1,"epoch":2,"ops":[]}}')[2]
    assert frame_decode(good[:-1])[0] is Status.INVALID_MESSAGE
    assert frame_decode(good + b" ")[0] is Status.INVALID_MESSAGE
