"""The device side of Octoprotocol, sans-I/O: numbering events, bootstrap, applying state.

A ``DeviceClient`` owns one ``DeviceStateMachine``. Every change to it (an emitted event, a
bootstrap, a state update, consumed events dropped) bumps ``version``; the I/O layer stores
``machine()`` in one transaction before it sends what the change produced, so a crash returns
the device to a state the chain has never seen ahead of.

Decisions:

- **Locked while bootstrapping.** From ``connect()`` until ``BootstrapComplete``, emitted
  (Name, Payload) pairs queue outside the state machine, unnumbered: the chain may hold
  sequencers this device forgot, and only ``BootstrapComplete.NextDeviceSequencer`` says which
  numbers are free. The queue is not durable; a crash loses it, as the seed allows.
- **BootstrapComplete**: merge ``NewEvents``, drop ``Kill``, take the state and its sequencer,
  and number from the larger of our next sequencer and the chain's.
- **StateUpdate**: applied once, in order (a replacement may skip ahead); a gap means the head
  lost track of us and the connection must bootstrap again (``SequenceGap``). The device drops
  the events the update (or a ``DeviceNotice``) says were consumed.
- Events stay in the map until consumed, not merely acknowledged: a head that fails before
  forwarding them gets them again from the next bootstrap.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from octosync.chain.json_tree import JsonTree, merge_patch
from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    DeviceEvent,
    DeviceNotice,
    DeviceStateMachine,
    HeadToDevice,
    StateUpdate,
)
from octosync.errors import LocalProtocolError, RemoteProtocolError, SequenceGap


class Phase(enum.Enum):
    DISCONNECTED = "disconnected"
    BOOTSTRAPPING = "bootstrapping"
    LIVE = "live"


Merge = Callable[[JsonTree, JsonTree], JsonTree]
"""RFC 7386 merge patch, pure: ``merge_patch`` or a memo of it shared by devices (``links``)."""


class DeviceClient:
    def __init__(
        self, name: str, machine: DeviceStateMachine | None = None, *, merge: Merge = merge_patch
    ) -> None:
        sm = machine or DeviceStateMachine()
        self.name = name
        self.merge = merge
        self.events: dict[int, DeviceEvent] = dict(sorted(sm.events.items()))
        self.next_sequencer = sm.next_device_sequencer
        self.state: JsonTree = sm.state
        self.state_sequencer = sm.state_sequencer
        self.phase = Phase.DISCONNECTED
        self.queued: list[tuple[str, str]] = []
        self.acked: set[int] = set()
        """Sequencers the head said are durable at the tail (this connection's knowledge)."""
        self.consumed: set[int] = set()
        self.version = 0
        """Bumped on every change to the state machine; the I/O layer persists when it moves."""

    def machine(self) -> DeviceStateMachine:
        return DeviceStateMachine(
            events=dict(self.events),
            next_device_sequencer=self.next_sequencer,
            state=self.state,
            state_sequencer=self.state_sequencer,
        )

    def emit(self, name: str, payload: str) -> list[DeviceEvent]:
        """The UI produced (name, payload): number it now, or queue it while locked."""
        if self.phase is not Phase.LIVE:
            self.queued.append((name, payload))
            return []
        return [self._number(name, payload)]

    def _number(self, name: str, payload: str) -> DeviceEvent:
        event = DeviceEvent(self.next_sequencer, name, payload)
        self.events[event.device_sequencer] = event
        self.next_sequencer += 1
        self.version += 1
        return event

    def connect(self) -> BootstrapChainRequest:
        """A new connection to the head: lock and ask to be bootstrapped."""
        self.phase = Phase.BOOTSTRAPPING
        return BootstrapChainRequest(self.next_sequencer, dict(self.events))

    def disconnect(self) -> None:
        self.phase = Phase.DISCONNECTED

    def receive(self, message: HeadToDevice) -> list[DeviceEvent]:
        """A message from the head; returns the events to send now (queued ones, once live)."""
        if isinstance(message, BootstrapComplete):
            return self._bootstrapped(message)
        if self.phase is not Phase.LIVE:
            raise RemoteProtocolError(
                f"{type(message).__name__} before BootstrapComplete", path="$.Type"
            )
        if isinstance(message, StateUpdate):
            self._apply(message)
        elif isinstance(message, DeviceNotice):
            self.acked.update(message.acked)
            self._drop(message.consumed)
        return []

    def _bootstrapped(self, complete: BootstrapComplete) -> list[DeviceEvent]:
        if self.phase is not Phase.BOOTSTRAPPING:
            raise LocalProtocolError("BootstrapComplete without a bootstrap in flight")
        self.events.update(complete.new_events)
        self.events = dict(sorted(self.events.items()))
        self._drop(complete.kill)
        self.next_sequencer = max(self.next_sequencer, complete.next_device_sequencer)
        self.state = complete.change
        self.state_sequencer = complete.state_sequencer
        self.phase = Phase.LIVE
        self.version += 1
        queued, self.queued = self.queued, []
        return [self._number(name, payload) for name, payload in queued]

    def _apply(self, update: StateUpdate) -> None:
        if update.sequencer <= self.state_sequencer:
            return
        if update.replace:
            self.state = update.change
        elif update.sequencer == self.state_sequencer + 1:
            self.state = self.merge(self.state, update.change)
        else:
            raise SequenceGap(
                f"state update {update.sequencer} after {self.state_sequencer}",
                path="$.Sequencer",
            )
        self.state_sequencer = update.sequencer
        self.version += 1
        self._drop(update.consumed.get(self.name, ()))

    def _drop(self, sequencers: tuple[int, ...]) -> None:
        for d in sequencers:
            self.consumed.add(d)
            if self.events.pop(d, None) is not None:
                self.version += 1
