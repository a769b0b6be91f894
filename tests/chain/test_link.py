"""The seed's scenarios, one rule at a time, on links and devices without sockets."""

from __future__ import annotations

import json

import pytest

from octosync.chain.device import DeviceClient
from octosync.chain.link import ChainLink, ToDevice, ToDevices, ToDownstream, ToUpstream
from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    ChainAck,
    DeviceEvent,
    DeviceNotice,
    DeviceStateMachine,
    Event,
    StateChange,
    StateSnapshot,
    StateUpdate,
)
from octosync.errors import (
    ComputeContract,
    LocalProtocolError,
    RemoteProtocolError,
    ReplicationError,
    SequenceGap,
)
from tests.chain.sim import Sim


def join(name: str) -> tuple[str, str]:
    return "join", json.dumps({"name": name})


def move(dx: int) -> tuple[str, str]:
    return "move", json.dumps({"dx": dx, "dy": 0})


def consume_all(state: object, events: list[Event]) -> StateChange:
    return StateChange(
        change={"seen": len(events)}, event_kill=tuple(e.chain_sequencer for e in events)
    )


def head_with(device: str, *events: DeviceEvent) -> ChainLink:
    head = ChainLink()
    for e in events:
        head.receive_device_event(device, e)
    return head


def test_device_event_appends_with_next_chain_sequencer_and_is_forwarded() -> None:
    head = ChainLink(has_downstream=True)
    out = head.receive_device_event("a", DeviceEvent(1, "join", "{}"))
    assert out == [ToDownstream(Event("a", 1, 1, "join", "{}"))]
    out = head.receive_device_event("b", DeviceEvent(1, "join", "{}"))
    assert out == [ToDownstream(Event("b", 1, 2, "join", "{}"))]
    assert head.next_chain == 3


def test_duplicate_is_not_reappended_and_acked_once_durable() -> None:
    head = ChainLink(has_downstream=True)
    head.receive_device_event("a", DeviceEvent(1, "join", "{}"))
    assert head.receive_device_event("a", DeviceEvent(1, "join", "{}")) == []
    assert len(head.events) == 1
    head.on_chain_ack(1)
    again = head.receive_device_event("a", DeviceEvent(1, "join", "{}"))
    assert again == [ToDevice("a", DeviceNotice(acked=(1,)))]


def test_same_sequencer_with_another_payload_is_refused() -> None:
    head = head_with("a", DeviceEvent(1, "join", "{}"))
    with pytest.raises(ReplicationError, match="reused sequencer 1"):
        head.receive_device_event("a", DeviceEvent(1, "move", "{}"))


def test_event_at_or_below_device_trim_is_consumed_not_appended() -> None:
    head = head_with("a", DeviceEvent(1, "join", "{}"), DeviceEvent(2, "move", "{}"))
    head.compute(consume_all)
    assert head.trim == 3
    assert head.device_trims == {"a": 2}
    assert not head.events
    out = head.receive_device_event("a", DeviceEvent(2, "move", "{}"))
    assert out == [ToDevice("a", DeviceNotice(consumed=(2,)))]
    assert not head.events


def test_tail_acks_up_and_head_tells_each_device() -> None:
    tail = ChainLink(has_upstream=True)
    assert tail.ingest(Event("a", 1, 1, "join", "{}")) == [ToUpstream(ChainAck(1))]
    head = ChainLink(has_downstream=True)
    head.receive_device_event("a", DeviceEvent(1, "join", "{}"))
    head.receive_device_event("b", DeviceEvent(4, "join", "{}"))
    head.receive_device_event("a", DeviceEvent(2, "join", "{}"))
    out = head.on_chain_ack(3)
    assert out == [
        ToDevice("a", DeviceNotice(acked=(1, 2))),
        ToDevice("b", DeviceNotice(acked=(4,))),
    ]
    assert head.on_chain_ack(2) == []


def test_ingest_refuses_a_gap_and_ignores_resends() -> None:
    link = ChainLink(has_upstream=True, has_downstream=True)
    link.ingest(Event("a", 1, 1, "x", ""))
    assert link.ingest(Event("a", 1, 1, "x", "")) == []
    with pytest.raises(SequenceGap):
        link.ingest(Event("a", 3, 3, "x", ""))


def test_state_change_applies_once_in_order_with_merge_patch() -> None:
    link = ChainLink(has_upstream=True)
    for c in (1, 2, 3):
        link.ingest(Event("a", c, c, "x", ""))
    first = StateChange(change={"a": {"b": 1, "c": 2}}, event_kill=(2,), sequencer=1)
    assert link.apply_state_change(first) == [ToUpstream(first)]
    assert link.trim == 1  # event 1 is still live: trim waits (out-of-order consumption)
    assert link.events[2].tombstone
    assert link.device_trims == {"a": 2}
    assert link.apply_state_change(first) == []
    second = StateChange(change={"a": {"c": None}, "d": [1]}, event_kill=(1,), sequencer=2)
    link.apply_state_change(second)
    assert link.state == {"a": {"b": 1}, "d": [1]}
    assert link.trim == 3
    assert list(link.events) == [3]
    with pytest.raises(SequenceGap):
        link.apply_state_change(StateChange(sequencer=4))
    link.apply_state_change(StateChange(replace=True, change=[1, 2], sequencer=3))
    assert link.state == [1, 2]


def test_state_change_killing_an_event_not_held_is_refused() -> None:
    link = ChainLink(has_upstream=True)
    with pytest.raises(ReplicationError, match="does not hold live"):
        link.apply_state_change(StateChange(event_kill=(5,), sequencer=1))


def test_head_turns_state_changes_into_updates_naming_consumed_sequencers() -> None:
    head = ChainLink(has_downstream=True)
    head.receive_device_event("a", DeviceEvent(7, "x", ""))
    head.receive_device_event("b", DeviceEvent(3, "x", ""))
    out = head.apply_state_change(StateChange(change={"k": 1}, event_kill=(1, 2), sequencer=1))
    assert out == [ToDevices(StateUpdate(1, False, {"k": 1}, {"a": (7,), "b": (3,)}))]


def test_compute_contract_is_checked() -> None:
    tail = head_with("a", DeviceEvent(1, "x", ""))
    with pytest.raises(ComputeContract, match="not offered"):
        tail.compute(lambda s, es: StateChange(event_kill=(9,)))
    tail._compute_due = True
    with pytest.raises(ComputeContract, match="twice"):
        tail.compute(lambda s, es: StateChange(event_kill=(1, 1)))
    tail._compute_due = True
    with pytest.raises(ComputeContract, match="bytes"):
        tail.compute(lambda s, es: StateChange(change={"x": b"raw"}))
    tail._compute_due = True
    with pytest.raises(ComputeContract, match="ZeroDivisionError"):
        tail.compute(lambda s, es: StateChange(change=1 // 0))


def test_compute_that_waits_is_not_repeated_until_new_events() -> None:
    calls: list[int] = []

    def wait(state: object, events: list[Event]) -> StateChange:
        calls.append(len(events))
        return StateChange()

    tail = head_with("a", DeviceEvent(1, "x", ""))
    assert tail.compute(wait) == []
    assert tail.compute(wait) == []
    tail.receive_device_event("a", DeviceEvent(2, "x", ""))
    tail.compute(wait)
    assert calls == [1, 2]


def test_only_the_head_ingests_device_events() -> None:
    middle = ChainLink(has_upstream=True, has_downstream=True)
    with pytest.raises(LocalProtocolError):
        middle.receive_device_event("a", DeviceEvent(1, "x", ""))
    with pytest.raises(LocalProtocolError):
        middle.bootstrap("a", BootstrapChainRequest(1))


# -- bootstrap: the seed's "what happens when a device connects" --------------------------------


def test_bootstrap_socket_loss_accurate_device() -> None:
    """The device holds what the chain holds: nothing new, nothing killed, state assumed."""
    head = head_with("a", DeviceEvent(1, *join("A")))
    request = BootstrapChainRequest(2, {1: DeviceEvent(1, *join("A"))})
    out = head.bootstrap("a", request)
    assert out[0] == ToDevice("a", BootstrapComplete(2, (), {}, None, 0))
    assert len(head.events) == 1


def test_bootstrap_socket_loss_events_sent_while_broken_are_ingested() -> None:
    head = head_with("a", DeviceEvent(1, *join("A")))
    request = BootstrapChainRequest(3, {1: DeviceEvent(1, *join("A")), 2: DeviceEvent(2, *move(1))})
    head.bootstrap("a", request)
    assert [e.device_sequencer for e in head.events.values()] == [1, 2]


def test_bootstrap_device_data_loss_recovers_events_and_never_reuses_sequencers() -> None:
    head = head_with("a", *(DeviceEvent(d, *move(d)) for d in (1, 2, 3, 4)))
    head.compute(lambda s, es: StateChange(event_kill=(1, 2)))  # 1, 2 consumed and trimmed
    out = head.bootstrap("a", BootstrapChainRequest(1))  # the device lost everything
    complete = out[0]
    assert isinstance(complete, ToDevice)
    assert isinstance(complete.message, BootstrapComplete)
    assert complete.message.new_events == {3: DeviceEvent(3, *move(3)), 4: DeviceEvent(4, *move(4))}
    assert complete.message.next_device_sequencer == 5
    head.compute(lambda s, es: StateChange(event_kill=(3, 4)))
    out = head.bootstrap("a", BootstrapChainRequest(1))  # lost everything again; nothing held
    complete = out[0]
    assert isinstance(complete, ToDevice)
    assert isinstance(complete.message, BootstrapComplete)
    assert complete.message.next_device_sequencer == 5  # above the trim, not 1


def test_bootstrap_device_crash_to_prior_state_kills_consumed_events() -> None:
    """The device restored a backup that still holds events the chain consumed."""
    head = head_with("a", DeviceEvent(1, *join("A")), DeviceEvent(2, *move(1)))
    head.compute(consume_all)
    out = head.bootstrap("a", BootstrapChainRequest(2, {1: DeviceEvent(1, *join("A"))}))
    complete = out[0]
    assert isinstance(complete, ToDevice)
    assert complete.message == BootstrapComplete(3, (1,), {}, {"seen": 2}, 1)
    client = DeviceClient("a", DeviceStateMachine({1: DeviceEvent(1, *join("A"))}, 2))
    client.connect()
    client.receive(complete.message)
    assert client.events == {}
    assert client.next_sequencer == 3
    assert client.state == {"seen": 2}


def test_bootstrap_tombstoned_but_held_event_is_killed() -> None:
    head = head_with("a", DeviceEvent(1, "x", ""), DeviceEvent(2, "x", ""))
    head.compute(lambda s, es: StateChange(event_kill=(2,)))
    assert head.events[2].tombstone
    out = head.bootstrap("a", BootstrapChainRequest(3, {2: DeviceEvent(2, "x", "")}))
    complete = out[0]
    assert isinstance(complete, ToDevice)
    assert isinstance(complete.message, BootstrapComplete)
    assert complete.message.kill == (2,)
    assert complete.message.new_events == {1: DeviceEvent(1, "x", "")}


def test_bootstrap_refuses_malformed_requests() -> None:
    head = ChainLink()
    with pytest.raises(RemoteProtocolError, match="filed under 1"):
        head.bootstrap("a", BootstrapChainRequest(5, {1: DeviceEvent(2, "x", "")}))
    with pytest.raises(RemoteProtocolError, match="not below"):
        head.bootstrap("a", BootstrapChainRequest(1, {1: DeviceEvent(1, "x", "")}))


def test_bootstrap_acks_duplicates_already_durable() -> None:
    head = ChainLink(has_downstream=True)
    head.receive_device_event("a", DeviceEvent(1, "x", ""))
    head.on_chain_ack(1)
    out = head.bootstrap("a", BootstrapChainRequest(2, {1: DeviceEvent(1, "x", "")}))
    assert out[1] == ToDevice("a", DeviceNotice(acked=(1,)))


# -- links failing: the seed's first, middle and last link ----------------------------------------


def three_links_with_traffic() -> Sim:
    sim = Sim(3)
    for device in ("a", "b"):
        sim.add_device(device)
        sim.connect(device)
    sim.settle()
    sim.emit("a", *join("A"))
    sim.emit("b", *join("B"))
    for dx in range(1, 6):
        sim.emit("a", *move(dx))
    return sim


def test_first_link_fails_devices_catch_the_next_one_up() -> None:
    sim = three_links_with_traffic()
    sim.deliver(("head", "a"))  # the head has some of a's events, forwarded nowhere yet
    sim.deliver(("head", "a"))
    sim.crash_link("L0")
    assert sim.order == ["L1", "L2"]
    sim.settle()
    sim.check_settled()
    assert sim.state()["players"]["a"]["x"] == 15
    assert sim.state()["audit"]["a"]["n"] == 6


def test_middle_link_fails_successor_is_brought_up_to_date() -> None:
    sim = three_links_with_traffic()
    for _ in range(4):
        for key in sim.pending():
            if key[0] == "head" or key == ("link", "L0", "L1"):
                sim.deliver(key)
    assert sim.links["L0"].next_chain > sim.links["L2"].next_chain  # events stuck in L1
    sim.crash_link("L1")
    sim.settle()
    sim.check_settled()
    assert sim.state()["audit"]["a"]["n"] == 6


def test_middle_link_fails_state_from_downstream_wins() -> None:
    sim = three_links_with_traffic()
    sim.settle()
    sim.emit("a", *move(1))
    for key in [("head", "a"), ("link", "L0", "L1"), ("link", "L1", "L2")]:
        sim.deliver(key)
    sim.compute()
    sim.deliver(("link", "L2", "L1"))  # the ack; the state change is still queued to L1
    state_in_flight = sim.links["L2"].next_state
    sim.crash_link("L1")
    assert sim.links["L0"].next_state < state_in_flight
    sim.deliver(("link", "L2", "L0"))  # the snapshot
    assert sim.links["L0"].next_state == state_in_flight
    sim.settle()
    sim.check_settled()


def test_last_link_fails_predecessor_computes_from_untrimmed_events() -> None:
    sim = three_links_with_traffic()
    for _ in range(6):
        for key in sim.pending():
            sim.deliver(key)
    sim.compute()  # the tail consumed events; its change never leaves it
    sim.crash_link("L2")
    sim.settle()
    sim.check_settled()
    assert sim.state()["audit"]["a"]["n"] == 6
    assert sim.state()["players"]["a"]["x"] == 15


def test_restarted_link_joins_at_the_tail_with_a_copy() -> None:
    sim = three_links_with_traffic()
    sim.settle()
    sim.crash_link("L1")
    name = sim.add_link()
    assert sim.order == ["L0", "L2", name]
    sim.emit("b", *move(2))
    sim.settle()
    sim.check_settled()
    assert sim.state()["players"]["b"]["x"] == 2


def test_out_of_order_consumption_trims_only_the_prefix() -> None:
    """The game takes at most 8 events per device per call: later devices overtake."""
    sim = Sim(1)
    sim.add_device("a")
    sim.add_device("b")
    for device in ("a", "b"):
        sim.connect(device)
    sim.settle()
    for _ in range(12):
        sim.emit("a", *move(1))
    sim.emit("b", *move(1))
    for _ in range(12):
        sim.deliver(("head", "a"))
    sim.deliver(("head", "b"))
    sim.compute()
    tail = sim.tail
    assert tail.trim == 9
    assert [c for c, e in tail.events.items() if e.tombstone] == [13]
    sim.settle()
    sim.check_settled()


def test_snapshot_older_than_the_link_is_ignored() -> None:
    link = ChainLink()
    link.apply_state_change(StateChange(change={"x": 1}, sequencer=1))
    assert link.adopt_snapshot(StateSnapshot(sequencer=0, state=None, trim=1)) == []
    assert link.state == {"x": 1}
