"""Nodes' presence messages: every message round-trips, and bad bytes are refused by type with
the failing field named."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.entries import node_of
from octosync.errors import DecodeError
from octosync.ipc.messages import CrdtOp, WireStamp
from octosync.wire import cluster_presence as wire

names = st.text(min_size=1, max_size=40)
ops = st.builds(
    lambda peer, wall, state: CrdtOp(
        node_of("presence"), WireStamp(wall, 0, peer), state, key=f"presence/pr/{peer}"
    ),
    st.integers(1, 2**31),
    st.integers(0, 2**48),
    st.binary(max_size=64),
)
messages = st.one_of(
    st.builds(wire.PresenceOps, names, names, st.lists(ops, min_size=1, max_size=wire.MAX_OPS)),
    st.builds(wire.PresenceAsk, names, names),
)


@given(messages)
def test_every_message_round_trips(message: wire.PresenceMessage) -> None:
    assert wire.decode(wire.encode(message)) == message


def test_bad_messages_are_refused_naming_the_field() -> None:
    enc = msgspec.msgpack.encode
    with pytest.raises(DecodeError) as empty:
        wire.decode(enc({"type": "presence-ops", "node": "n1", "stream": "doc", "ops": []}))
    assert empty.value.path == "$.ops"
    with pytest.raises(DecodeError) as nameless:
        wire.decode(enc({"type": "presence?", "node": "", "stream": "doc"}))
    assert nameless.value.path == "$.node"
    with pytest.raises(DecodeError) as unknown:
        wire.decode(enc({"type": "presence!", "node": "n1", "stream": "doc"}))
    assert unknown.value.path == "$.type"
    with pytest.raises(DecodeError):
        wire.decode(b"\xc1")
