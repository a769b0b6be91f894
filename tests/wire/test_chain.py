"""Octoprotocol codecs: round trips in both dialects, the seed's field names, strict decoding."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    ChainAck,
    ChainStateMachine,
    DeviceEvent,
    DeviceNotice,
    DeviceToHead,
    Event,
    HeadToDevice,
    LinkMessage,
    StateChange,
    StateSnapshot,
    StateUpdate,
)
from octosync.errors import DecodeError
from octosync.wire.chain import ChainCodec
from tests.chain.test_json_tree import json_values

seqs = st.integers(0, 2**40)
names = st.text(min_size=1, max_size=8)
device_events = st.builds(DeviceEvent, seqs, st.text(max_size=8), st.text(max_size=16))
events = st.builds(
    Event, names, seqs, seqs, st.text(max_size=8), st.text(max_size=8), st.booleans()
)
changes = st.builds(StateChange, st.booleans(), json_values, st.lists(seqs).map(tuple), seqs)
link_messages = st.one_of(
    events,
    changes,
    st.builds(ChainAck, seqs),
    st.builds(
        StateSnapshot,
        seqs,
        json_values,
        seqs,
        st.dictionaries(names, seqs, max_size=3),
        st.lists(seqs, max_size=3).map(tuple),
    ),
)
device_messages = st.one_of(
    device_events,
    st.builds(BootstrapChainRequest, seqs, st.dictionaries(seqs, device_events, max_size=3)),
)
head_messages = st.one_of(
    st.builds(
        BootstrapComplete,
        seqs,
        st.lists(seqs, max_size=3).map(tuple),
        st.dictionaries(seqs, device_events, max_size=3),
        json_values,
        seqs,
    ),
    st.builds(StateUpdate, seqs, st.booleans(), json_values),
    st.builds(DeviceNotice, st.lists(seqs, max_size=3).map(tuple)),
)


@pytest.mark.parametrize("dialect", ["msgpack", "json"])
@given(data=st.data())
def test_round_trip(dialect: Any, data: st.DataObject) -> None:
    for union, strategy in (
        (LinkMessage, link_messages),
        (DeviceToHead, device_messages),
        (HeadToDevice, head_messages),
    ):
        codec: ChainCodec[Any] = ChainCodec(union, dialect)
        message = data.draw(strategy)
        assert codec.decode(codec.encode(message)) == message


def test_json_uses_the_seed_field_names() -> None:
    codec: ChainCodec[Any] = ChainCodec(DeviceToHead, "json")
    text = codec.encode(BootstrapChainRequest(3, {1: DeviceEvent(1, "join", "{}")}))
    assert msgspec.json.decode(text) == {
        "Type": "BootstrapChainRequest",
        "NextDeviceSequencer": 3,
        "Events": {
            "1": {"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "join", "Payload": "{}"}
        },
    }


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (
            {"Type": "DeviceEvent", "DeviceSequencer": -1, "Name": "", "Payload": ""},
            "$.DeviceSequencer",
        ),
        ({"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": ""}, "$.Payload"),
        ({"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "", "Payload": "", "X": 1}, "$.X"),
        ({"Type": "Nope"}, "$.Type"),
        (
            {"Type": "BootstrapChainRequest", "NextDeviceSequencer": 1, "Events": {"x": 1}},
            "$.Events",
        ),
    ],
)
def test_strict_decode_names_the_field(raw: Any, path: str) -> None:
    for dialect in ("msgpack", "json"):
        codec: ChainCodec[Any] = ChainCodec(DeviceToHead, dialect)  # type: ignore[arg-type]
        data = msgspec.msgpack.encode(raw) if dialect == "msgpack" else msgspec.json.encode(raw)
        with pytest.raises(DecodeError) as info:
            codec.decode(data)
        assert info.value.path is not None
        assert info.value.path.startswith(path)


def test_msgpack_state_must_be_a_json_tree() -> None:
    codec: ChainCodec[Any] = ChainCodec(LinkMessage, "msgpack")
    raw = {
        "Type": "StateChange",
        "Replace": False,
        "Change": {"a": b"bin"},
        "EventKill": [],
        "Sequencer": 1,
    }
    with pytest.raises(DecodeError) as info:
        codec.decode(msgspec.msgpack.encode(raw))
    assert info.value.path == "$.Change.a"


def test_chain_state_machine_round_trips() -> None:
    codec: ChainCodec[ChainStateMachine] = ChainCodec(ChainStateMachine, "msgpack")
    machine = ChainStateMachine(
        {4: Event("a", 1, 4, "x", "", True)}, {"a": 1}, 5, 4, {"s": 1}, 3, 4
    )
    assert codec.decode(codec.encode(machine)) == machine
