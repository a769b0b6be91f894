"""The device state machine: numbering, the bootstrap lock, applying updates once."""

from __future__ import annotations

import pytest

from octosync.chain.device import DeviceClient, Phase
from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    DeviceEvent,
    DeviceNotice,
    DeviceStateMachine,
    StateUpdate,
)
from octosync.errors import LocalProtocolError, RemoteProtocolError, SequenceGap


def live(client: DeviceClient, complete: BootstrapComplete | None = None) -> None:
    client.connect()
    client.receive(complete or BootstrapComplete(client.next_sequencer))


def test_emit_numbers_from_next_sequencer_when_live() -> None:
    client = DeviceClient("a")
    live(client)
    assert client.emit("join", "{}") == [DeviceEvent(1, "join", "{}")]
    assert client.emit("move", "{}") == [DeviceEvent(2, "move", "{}")]
    assert client.machine() == DeviceStateMachine(
        {1: DeviceEvent(1, "join", "{}"), 2: DeviceEvent(2, "move", "{}")}, 3
    )


def test_bootstrap_locks_and_queues_unnumbered_events() -> None:
    client = DeviceClient("a", DeviceStateMachine({1: DeviceEvent(1, "x", "")}, 2))
    request = client.connect()
    assert request == BootstrapChainRequest(2, {1: DeviceEvent(1, "x", "")})
    assert client.emit("late", "1") == []
    assert client.next_sequencer == 2
    complete = BootstrapComplete(7, kill=(1,), new_events={5: DeviceEvent(5, "y", "")}, change=[1])
    sent = client.receive(complete)
    assert sent == [DeviceEvent(7, "late", "1")]
    assert client.phase is Phase.LIVE
    assert sorted(client.events) == [5, 7]
    assert client.state == [1]


def test_updates_apply_once_in_order_and_drop_consumed() -> None:
    client = DeviceClient("a")
    live(client, BootstrapComplete(1, change={"n": 0}, state_sequencer=3))
    client.emit("x", "")
    client.emit("x", "")
    client.receive(StateUpdate(4, False, {"n": 1}, {"a": (1,), "b": (1,)}))
    assert client.state == {"n": 1}
    assert sorted(client.events) == [2]
    client.receive(StateUpdate(4, False, {"n": 9}))
    assert client.state == {"n": 1}
    with pytest.raises(SequenceGap):
        client.receive(StateUpdate(6, False, {"n": 3}))
    client.receive(StateUpdate(6, True, {"m": 1}))
    assert client.state == {"m": 1}
    client.receive(DeviceNotice(acked=(2,), consumed=(2,)))
    assert client.events == {}
    assert client.acked == {2}


def test_messages_before_bootstrap_are_refused() -> None:
    client = DeviceClient("a")
    with pytest.raises(LocalProtocolError):
        client.receive(BootstrapComplete(1))
    client.connect()
    with pytest.raises(RemoteProtocolError, match="before BootstrapComplete"):
        client.receive(StateUpdate(1, True, {}))


def test_version_moves_with_every_durable_change() -> None:
    client = DeviceClient("a")
    live(client)
    v = client.version
    client.emit("x", "")
    assert client.version > v
    v = client.version
    client.receive(DeviceNotice(acked=(1,)))
    assert client.version == v
    client.receive(DeviceNotice(consumed=(1,)))
    assert client.version > v
