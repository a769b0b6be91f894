"""The cluster's messages: round trips, and strict decoding that names what is wrong."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.ipc.messages import Delta, Snapshot
from octosync.wire import cluster as wire
from tests.strategies import deltas, snapshots

nodes = st.from_regex(r"[A-Za-z0-9_-]{1,16}", fullmatch=True)
streams = st.text(min_size=1, max_size=30)
epochs = st.integers(0, 2**53)


@given(nodes, streams, epochs, epochs, st.integers(1, 5))
def test_a_frame_carries_the_message_and_its_epochs(
    node: str, stream: str, claim: int, base: int, span: int
) -> None:
    base = min(base, 2**53 - span)
    for msg in (Snapshot(epoch=base), Delta(base_epoch=base, epoch=base + span)):
        frame = wire.frame_of(node, stream, claim, msg)
        back = wire.decode(wire.encode(frame))
        assert isinstance(back, wire.StreamFrame)
        assert back == frame
        assert (back.from_epoch, back.to_epoch) == (
            (base, base) if isinstance(msg, Snapshot) else (base, base + span)
        )
        assert wire.decode_body(back) == msg


@given(nodes, st.dictionaries(streams, st.tuples(st.none() | epochs, st.integers(0, 9), epochs)))
def test_a_heartbeat_round_trips(node: str, loads: dict[str, tuple[int | None, int, int]]) -> None:
    beat = wire.Heartbeat(
        node, "ws://127.0.0.1:1/lazily", {s: wire.StreamLoad(*v) for s, v in loads.items()}, 3
    )
    assert wire.decode(wire.encode(beat)) == beat


def test_a_body_that_is_not_what_the_envelope_announces_is_refused() -> None:
    frame = wire.frame_of("n1", "s", 1, Delta(base_epoch=4, epoch=5))
    lying = msgspec.structs.replace(frame, from_epoch=3)
    with pytest.raises(DecodeError) as err:
        wire.decode_body(lying)
    assert err.value.path == "$.body"
    swapped = msgspec.structs.replace(frame, kind="snapshot")
    with pytest.raises(DecodeError):
        wire.decode_body(swapped)


@pytest.mark.parametrize(
    ("message", "path"),
    [
        (
            {
                "type": "frame",
                "node": "",
                "stream": "s",
                "claim": 1,
                "kind": "delta",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.node",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": -1,
                "kind": "delta",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.claim",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": 1,
                "kind": "reset",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.kind",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": 1,
                "kind": "delta",
                "from_epoch": 2**53 + 1,
                "to_epoch": 1,
                "body": b"",
            },
            "$.from_epoch",
        ),
        ({"type": "gossip", "node": "n"}, "$.type"),
    ],
)
def test_strict_decoding_names_the_field(message: dict[str, object], path: str) -> None:
    with pytest.raises(DecodeError) as err:
        wire.decode(msgspec.msgpack.encode(message))
    assert err.value.path == path


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        wire.decode(data)


@given(st.one_of(snapshots(), deltas(tagged=True)))
def test_any_state_plane_message_crosses_unchanged(msg: Snapshot | Delta) -> None:
    """The body is ``wire.msgpack``: exact for every message in the spelling that dialect
    reads back (an implied node state is not written; ``tests/wire/test_roundtrip.py``)."""
    back = wire.decode(wire.encode(wire.frame_of("n1", "s", 7, msg)))
    assert isinstance(back, wire.StreamFrame)
    assert wire.decode_body(back) == msg
