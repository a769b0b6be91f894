"""The seed's records and the messages that carry them, as frozen msgspec Structs.

Field names on the wire are the seed's (``DeviceSequencer``, ``EventKill``, ...); Python uses
snake case. Every record is tagged by its class name in ``Type`` so one decoder reads a union.
Additions to the seed, each because a rule below needs it:

- ``StateChange.sequencer``: the state sequencer, so each link applies a change exactly once.
- ``BootstrapComplete.state_sequencer`` and ``DeviceStateMachine.state_sequencer``: a device
  knows which state it holds and applies each later update once.
- ``ChainStateMachine.next_state_sequencer`` and ``acked_through`` (see ``chain.link``).
- Messages the seed leaves implicit: ``ChainAck`` (the tail has an event durably, travelling
  up), ``StateUpdate`` (a state change as devices see it, with the device sequencers it
  consumed), ``DeviceNotice`` (acknowledged and consumed sequencers for one device) and
  ``StateSnapshot`` (a link's applied state, sent up when links are joined after a failure).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.chain.json_tree import JsonTree

Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A sequencer: device, chain or state. Zero means "none yet"; real ones start at 1."""
DeviceName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
EventName = Annotated[str, msgspec.Meta(max_length=256)]


class ChainRecord(
    msgspec.Struct,
    frozen=True,
    rename="pascal",
    tag_field="Type",
    tag=True,
    forbid_unknown_fields=True,
):
    """Base of every chain record: frozen, seed field names, tagged by class name."""


class DeviceEvent(ChainRecord, frozen=True):
    """What the UI emitted: (Name, Payload), numbered by the device's state machine."""

    device_sequencer: Seq
    name: EventName
    payload: str


class Event(ChainRecord, frozen=True):
    """A device event as the chain holds it, numbered by the chain."""

    device: DeviceName
    device_sequencer: Seq
    chain_sequencer: Seq
    name: EventName
    payload: str
    tombstone: bool = False


class StateChange(ChainRecord, frozen=True):
    """What the compute node produced: a merge patch (or a replacement) and the events used."""

    replace: bool = False
    change: JsonTree = {}
    event_kill: tuple[Seq, ...] = ()
    sequencer: Seq = 0
    """Stamped by the compute node; an application's ``compute`` leaves it at 0."""


class BootstrapChainRequest(ChainRecord, frozen=True):
    """A device's first message on a connection: what it holds and where it will number next."""

    next_device_sequencer: Seq
    events: dict[Seq, DeviceEvent] = {}


class BootstrapComplete(ChainRecord, frozen=True):
    """The head's answer: events the device lost, events already consumed, the whole state."""

    next_device_sequencer: Seq
    kill: tuple[Seq, ...] = ()
    new_events: dict[Seq, DeviceEvent] = {}
    change: JsonTree = None
    state_sequencer: Seq = 0


class DeviceStateMachine(ChainRecord, frozen=True):
    """A device's durable state; stored in one transaction, so a crash returns a prior one."""

    events: dict[Seq, DeviceEvent] = {}
    next_device_sequencer: Seq = 1
    state: JsonTree = None
    state_sequencer: Seq = 0


class ChainStateMachine(ChainRecord, frozen=True):
    """One link's replica: events from devices (upstream), state from compute (downstream)."""

    events: dict[Seq, Event] = {}
    device_trims: dict[DeviceName, Seq] = {}
    next_chain_sequencer: Seq = 1
    trim: Seq = 1
    """The lowest chain sequencer still held; everything below it was consumed."""
    state: JsonTree = None
    next_state_sequencer: Seq = 1
    acked_through: Seq = 0
    """Every chain sequencer up to this one is durable at the tail."""


class ChainAck(ChainRecord, frozen=True):
    """Up the chain: the tail holds every event through ``through`` durably."""

    through: Seq


class StateSnapshot(ChainRecord, frozen=True):
    """Up the chain on a join: a link's applied state, which supersedes older sequencers."""

    sequencer: Seq
    """The last state sequencer applied (``next_state_sequencer - 1``)."""
    state: JsonTree
    trim: Seq
    device_trims: dict[DeviceName, Seq] = {}
    tombstones: tuple[Seq, ...] = ()
    """Consumed events at or above ``trim`` (consumed out of order, still held)."""


class StateUpdate(ChainRecord, frozen=True):
    """Head to devices: one applied state change (or snapshot, as a replacement)."""

    sequencer: Seq
    replace: bool
    change: JsonTree
    consumed: dict[DeviceName, tuple[Seq, ...]] = {}
    """Per device, the device sequencers this change consumed; devices drop those events."""


class DeviceNotice(ChainRecord, frozen=True):
    """Head to one device: sequencers now durable at the tail, and sequencers consumed."""

    acked: tuple[Seq, ...] = ()
    consumed: tuple[Seq, ...] = ()


DeviceToHead = BootstrapChainRequest | DeviceEvent
HeadToDevice = BootstrapComplete | StateUpdate | DeviceNotice
LinkMessage = Event | StateChange | ChainAck | StateSnapshot
