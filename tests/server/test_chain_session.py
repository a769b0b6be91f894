"""The /chain face's session, bytes in and bytes out: no sockets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest

from octosync.chain.records import BootstrapChainRequest, DeviceEvent
from octosync.errors import DecodeError, HandshakeFailed
from octosync.links import frames
from octosync.server.auth import ANONYMOUS_DEV
from octosync.server.chain_session import ChainSession
from octosync.server.config import ServerConfig
from octosync.server.runtime import Runtime
from octosync.wire import chain_link

EVENT = b'{"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "move", "Payload": "{}"}'


async def read(data: bytes) -> chain_link.FromDevice:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frame = await frames.read_frame(reader)
    assert isinstance(frame, chain_link.FromDevice)
    return frame


def session() -> tuple[ChainSession, list[bytes], list[bool]]:
    sent: list[bytes] = []
    closed: list[bool] = []
    rt = Runtime(ServerConfig(insecure_dev=True))
    return ChainSession(rt, ANONYMOUS_DEV, sent.append, lambda: closed.append(True)), sent, closed


def test_the_first_record_must_be_the_bootstrap_and_nothing_else_reaches_the_head() -> None:
    s, sent, _ = session()
    event = s.decode(EVENT)
    with pytest.raises(HandshakeFailed):
        s.handle(event)
    assert sent == []
    assert not s.ready


def test_records_are_relayed_to_the_head_as_link_frames() -> None:
    s, sent, closed = session()
    s.handle(s.decode(b'{"Type": "BootstrapChainRequest", "NextDeviceSequencer": 1}'))
    s.handle(s.decode(EVENT))
    assert s.ready
    relayed = [asyncio.run(read(f)) for f in sent]
    assert [type(f.message) for f in relayed] == [BootstrapChainRequest, DeviceEvent]
    s.close()
    assert closed == [True]


def test_bad_records_are_typed_errors_in_the_devices_json() -> None:
    s, sent, _ = session()
    with pytest.raises(DecodeError) as caught:
        s.decode(b'{"Type": "BootstrapChainRequest", "NextDeviceSequencer": "one"}')
    s.send_error(caught.value)
    (frame,) = s.outgoing
    body = json.loads(frame[2:])
    assert (body["Type"], body["Code"]) == ("Error", "DecodeError")
    assert sent == []
    assert msgspec.json.decode(frame[2:])["Message"] == caught.value.message


def test_with_a_journal_nothing_reaches_the_head_before_its_events_are_recorded() -> None:
    sent: list[bytes] = []
    recorded: list[tuple[list[DeviceEvent], Any]] = []
    rt = Runtime(ServerConfig(insecure_dev=True))
    s = ChainSession(
        rt, ANONYMOUS_DEV, sent.append, lambda: None, lambda e, then: recorded.append((e, then))
    )
    held = (
        b'{"Type": "BootstrapChainRequest", "NextDeviceSequencer": 3, "Events": {'
        b'"2": {"Type": "DeviceEvent", "DeviceSequencer": 2, "Name": "b", "Payload": "{}"},'
        b'"1": {"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "a", "Payload": "{}"}}}'
    )
    s.handle(s.decode(held))
    s.handle(s.decode(EVENT))
    assert sent == []  # both wait for their commit
    assert [[(e.device_sequencer, e.name) for e in events] for events, _ in recorded] == [
        [(1, "a"), (2, "b")],  # a bootstrap's held events, in sequencer order
        [(1, "move")],
    ]
    for _, then in recorded:
        then()
    relayed = [asyncio.run(read(f)) for f in sent]
    assert [type(f.message) for f in relayed] == [BootstrapChainRequest, DeviceEvent]
