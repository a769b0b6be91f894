"""One link of the chain: the seed's ``IngestDeviceEvent`` / ``Ingest`` / ``Bootstrap``, sans-I/O.

A ``ChainLink`` holds one replica (``ChainStateMachine``) and turns inputs into outputs
(``ToDownstream``, ``ToUpstream``, ``ToDevice``, ``ToDevices``). The I/O layer persists
``take_dirty()`` in one transaction before it sends the outputs of a batch, so nothing leaves
a link that the link could forget. Events flow down (head to tail); state, acks and snapshots
flow up. The head (no upstream) talks to devices; the tail (no downstream) computes.

Decisions where the seed is silent, inverted or unfinished:

1. **Duplicates.** An event already held for (device, device sequencer) is acknowledged, not
   re-appended: the device is told once the tail holds it (at once if it already does).
   A held event that is tombstoned, or one not held at or below the device's trim, was
   consumed: it goes in ``Kill`` (bootstrap) or a ``DeviceNotice.consumed`` (live). The same
   (device, sequencer) with a different name or payload is a ``ReplicationError``: the device
   skipped its bootstrap.
2. **Device trims** are the highest device sequencer consumed per device. A device sends its
   events in sequencer order over a FIFO connection and re-sends all it holds on bootstrap, so
   the chain never consumes sequencer ``d`` of a device while a lower one it will still receive
   is missing; a sequencer at or below the trim that is not held was therefore consumed.
3. **Bootstrap numbering.** ``BootstrapComplete.NextDeviceSequencer`` is greater than every
   sequencer the chain holds for the device, than its trim, and than the request's own (the
   seed's comparison is inverted). A device that lost its data can never reuse a sequencer.
   ``NewEvents`` are the device's held, unconsumed events the request lacks.
4. **State sequencers.** The compute node stamps each ``StateChange`` with the next state
   sequencer; a link applies sequencer ``n`` only when it has applied ``n - 1`` (lower ones
   are duplicates and ignored; higher is a ``SequenceGap``: links are FIFO). Applying means:
   RFC 7386 merge patch (or replacement when ``Replace``), tombstone ``EventKill``, record the
   device trims, advance ``Trim`` over the tombstoned prefix, dropping those events.
5. **Out-of-order consumption.** ``compute`` may consume any subset of the events it is given;
   the rest stay live and are offered again. ``Trim`` stops at the first live event, so a
   tombstoned event above it stays held (tombstoned) until the prefix catches up.
6. **Acknowledgement.** An event is durable everywhere once the tail holds it (every link
   upstream holds a superset). The tail sends ``ChainAck(through)`` up; the head then tells
   each device which of its sequencers are safe. A link that becomes the tail acknowledges
   everything it holds.
7. **Joining links** (the seed's ``Ingest(mine, prior)``). The link nearer the devices is
   authoritative for events, the one nearer compute for state. When an upstream link is
   joined to a downstream one, the downstream sends its ``StateSnapshot`` up and the upstream
   sends every held event at or above the downstream's ``NextChainSequencer`` down. A link
   adopts a snapshot newer than its state: it takes the state, tombstones what the snapshot
   consumed, and passes its own snapshot on up (the head turns it into a replacing
   ``StateUpdate`` for devices).
8. **Compute scheduling.** The tail offers its live events (at most ``batch_limit``, in chain
   order) whenever something new arrived or the previous call consumed something; a call that
   consumes nothing and changes nothing is not published and not repeated until new events
   arrive, so an application may wait for events it needs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence

import msgspec

from octosync.chain.json_tree import JsonTree, check_json, merge_patch
from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    ChainAck,
    ChainStateMachine,
    DeviceEvent,
    DeviceNotice,
    Event,
    HeadToDevice,
    LinkMessage,
    StateChange,
    StateSnapshot,
    StateUpdate,
)
from octosync.errors import (
    ComputeContract,
    LocalProtocolError,
    OctosyncError,
    RemoteProtocolError,
    ReplicationError,
    SequenceGap,
)

Compute = Callable[[JsonTree, Sequence[Event]], StateChange]
"""The application: deterministic, given the state and live events in chain order."""

BATCH_LIMIT = 512


class ToDownstream(msgspec.Struct, frozen=True):
    message: LinkMessage


class ToUpstream(msgspec.Struct, frozen=True):
    message: LinkMessage


class ToDevice(msgspec.Struct, frozen=True):
    device: str
    message: HeadToDevice


class ToDevices(msgspec.Struct, frozen=True):
    """To every device connected to the head (and to observers of the state)."""

    message: StateUpdate


Output = ToDownstream | ToUpstream | ToDevice | ToDevices


class Ingested(enum.Enum):
    APPENDED = "appended"
    DUPLICATE = "duplicate"
    CONSUMED = "consumed"


class Dirty(msgspec.Struct):
    """What changed since the last ``take_dirty``: events to upsert, the trim to delete below."""

    upserts: dict[int, Event]
    trim: int


class ChainLink:
    def __init__(
        self,
        machine: ChainStateMachine | None = None,
        *,
        has_upstream: bool = False,
        has_downstream: bool = False,
        batch_limit: int = BATCH_LIMIT,
    ) -> None:
        sm = machine or ChainStateMachine()
        self.events: dict[int, Event] = dict(sorted(sm.events.items()))
        self.by_device: dict[str, dict[int, int]] = {}
        for c, e in self.events.items():
            self.by_device.setdefault(e.device, {})[e.device_sequencer] = c
        self.device_trims = dict(sm.device_trims)
        self.next_chain = sm.next_chain_sequencer
        self.trim = sm.trim
        self.state: JsonTree = sm.state
        self.next_state = sm.next_state_sequencer
        self.acked_through = sm.acked_through
        self.has_upstream = has_upstream
        self.has_downstream = has_downstream
        self.batch_limit = batch_limit
        self._compute_due = True
        self._upserts: dict[int, Event] = {}
        self._changed = False

    # -- views -------------------------------------------------------------------------------

    @property
    def is_head(self) -> bool:
        return not self.has_upstream

    @property
    def is_tail(self) -> bool:
        return not self.has_downstream

    @property
    def compute_due(self) -> bool:
        """The tail has events ``compute`` has not been offered since they changed."""
        return self.is_tail and self._compute_due

    def machine(self) -> ChainStateMachine:
        """The whole replica, as a new link joining at the tail copies it."""
        return ChainStateMachine(
            events=dict(self.events),
            device_trims=dict(self.device_trims),
            next_chain_sequencer=self.next_chain,
            trim=self.trim,
            state=self.state,
            next_state_sequencer=self.next_state,
            acked_through=self.acked_through,
        )

    def snapshot(self) -> StateSnapshot:
        """This link's applied state, for the upstream link it is joined to."""
        return StateSnapshot(
            sequencer=self.next_state - 1,
            state=self.state,
            trim=self.trim,
            device_trims=dict(self.device_trims),
            tombstones=tuple(c for c, e in self.events.items() if e.tombstone),
        )

    def live_events(self) -> list[Event]:
        return [e for e in self.events.values() if not e.tombstone]

    def take_dirty(self) -> Dirty | None:
        """What to persist (one transaction) before the outputs produced so far are sent."""
        if not self._changed:
            return None
        dirty = Dirty(self._upserts, self.trim)
        self._upserts = {}
        self._changed = False
        return dirty

    # -- roles -------------------------------------------------------------------------------

    def attach_downstream(self, downstream_next_chain: int) -> list[Output]:
        """A downstream link joined: send it every held event it does not have yet."""
        self.has_downstream = True
        return [ToDownstream(e) for c, e in self.events.items() if c >= downstream_next_chain]

    def detach_downstream(self) -> list[Output]:
        """The downstream link is gone: this link is the tail, holds everything durably."""
        self.has_downstream = False
        self._compute_due = True
        return self.on_chain_ack(self.next_chain - 1)

    def attach_upstream(self) -> list[Output]:
        """An upstream link joined: it learns this link's state (nearer compute wins) and acks."""
        self.has_upstream = True
        outputs: list[Output] = [ToUpstream(self.snapshot())]
        if self.acked_through:
            outputs.append(ToUpstream(ChainAck(self.acked_through)))
        return outputs

    def detach_upstream(self) -> None:
        """The upstream link is gone: this link is the head and talks to devices."""
        self.has_upstream = False

    # -- events, down the chain ----------------------------------------------------------------

    def receive_device_event(self, device: str, event: DeviceEvent) -> list[Output]:
        """A device's event on a bootstrapped connection (``IngestDeviceEvent``)."""
        outputs: list[Output] = []
        result, c = self._ingest_device_event(device, event, outputs)
        d = event.device_sequencer
        if result is Ingested.CONSUMED:
            outputs.append(ToDevice(device, DeviceNotice(consumed=(d,))))
        elif result is Ingested.DUPLICATE and c <= self.acked_through:
            outputs.append(ToDevice(device, DeviceNotice(acked=(d,))))
        return outputs

    def bootstrap(self, device: str, request: BootstrapChainRequest) -> list[Output]:
        """``Bootstrap``: the ``BootstrapComplete`` first, then what the ingest caused."""
        if self.has_upstream:
            raise LocalProtocolError("only the head bootstraps devices")
        for key, event in request.events.items():
            if key != event.device_sequencer:
                raise RemoteProtocolError(
                    f"event filed under {key} has DeviceSequencer {event.device_sequencer}",
                    path=f"$.Events.{key}",
                )
            if key >= request.next_device_sequencer:
                raise RemoteProtocolError(
                    f"event {key} is not below NextDeviceSequencer {request.next_device_sequencer}",
                    path=f"$.Events.{key}",
                )
        held = self.by_device.get(device, {})
        new_events = {
            d: _device_event(self.events[c])
            for d, c in sorted(held.items())
            if d not in request.events and not self.events[c].tombstone
        }
        outputs: list[Output] = []
        kill: list[int] = []
        acked: list[int] = []
        for d in sorted(request.events):
            result, c = self._ingest_device_event(device, request.events[d], outputs)
            if result is Ingested.CONSUMED:
                kill.append(d)
            elif result is Ingested.DUPLICATE and c <= self.acked_through:
                acked.append(d)
        held = self.by_device.get(device, {})
        next_d = max(
            request.next_device_sequencer,
            max(held, default=0) + 1,
            self.device_trims.get(device, 0) + 1,
        )
        complete = BootstrapComplete(
            next_device_sequencer=next_d,
            kill=tuple(kill),
            new_events=new_events,
            change=self.state,
            state_sequencer=self.next_state - 1,
        )
        first: list[Output] = [ToDevice(device, complete)]
        if acked:
            first.append(ToDevice(device, DeviceNotice(acked=tuple(acked))))
        return first + outputs

    def _ingest_device_event(
        self, device: str, event: DeviceEvent, outputs: list[Output]
    ) -> tuple[Ingested, int]:
        if self.has_upstream:
            raise LocalProtocolError("only the head ingests device events")
        d = event.device_sequencer
        if d < 1:
            raise RemoteProtocolError("device sequencers start at 1", path="$.DeviceSequencer")
        c = self.by_device.get(device, {}).get(d)
        if c is not None:
            held = self.events[c]
            if held.name != event.name or held.payload != event.payload:
                raise ReplicationError(
                    f"device {device!r} reused sequencer {d} for a different event",
                    path="$.DeviceSequencer",
                )
            return (Ingested.CONSUMED if held.tombstone else Ingested.DUPLICATE), c
        if d <= self.device_trims.get(device, 0):
            return Ingested.CONSUMED, 0
        appended = Event(
            device=device,
            device_sequencer=d,
            chain_sequencer=self.next_chain,
            name=event.name,
            payload=event.payload,
        )
        outputs.extend(self._append(appended))
        return Ingested.APPENDED, appended.chain_sequencer

    def ingest(self, event: Event) -> list[Output]:
        """``Ingest``: an event from the upstream link, in chain order."""
        c = event.chain_sequencer
        if c < self.next_chain:
            return []  # held, or below the trim: a catch-up resend
        if c > self.next_chain:
            raise SequenceGap(
                f"event {c} arrived while {self.next_chain} was expected", path="$.ChainSequencer"
            )
        if event.device_sequencer in self.by_device.get(event.device, {}):
            raise ReplicationError(
                f"event {c} repeats device {event.device!r} sequencer {event.device_sequencer}",
                path="$.DeviceSequencer",
            )
        return self._append(event)

    def _append(self, event: Event) -> list[Output]:
        c = event.chain_sequencer
        self.events[c] = event
        self.by_device.setdefault(event.device, {})[event.device_sequencer] = c
        self.next_chain = c + 1
        self._dirty(event)
        if self.has_downstream:
            return [ToDownstream(event)]
        self._compute_due = True
        return self.on_chain_ack(c)

    def receive(self, message: LinkMessage) -> list[Output]:
        """A message from a neighbouring link: events from upstream, the rest from downstream."""
        if isinstance(message, Event):
            return self.ingest(message)
        if isinstance(message, StateChange):
            return self.apply_state_change(message)
        if isinstance(message, ChainAck):
            return self.on_chain_ack(message.through)
        return self.adopt_snapshot(message)

    # -- acks, state and snapshots, up the chain ---------------------------------------------

    def on_chain_ack(self, through: int) -> list[Output]:
        """``ChainAck``: relay it up; at the head, tell each device what is now durable."""
        if through <= self.acked_through:
            return []
        previous, self.acked_through = self.acked_through, through
        self._changed = True
        if self.has_upstream:
            return [ToUpstream(ChainAck(through))]
        per_device: dict[str, list[int]] = {}
        for c in range(max(previous + 1, self.trim), through + 1):
            e = self.events.get(c)
            if e is not None:
                per_device.setdefault(e.device, []).append(e.device_sequencer)
        return [ToDevice(dev, DeviceNotice(acked=tuple(ds))) for dev, ds in per_device.items()]

    def apply_state_change(self, change: StateChange) -> list[Output]:
        """A change from downstream (or this tail's compute), applied once, in order."""
        if change.sequencer < self.next_state:
            return []
        if change.sequencer > self.next_state:
            raise SequenceGap(
                f"state change {change.sequencer} arrived while {self.next_state} was expected",
                path="$.Sequencer",
            )
        consumed = self._kill(change.event_kill, strict=True, sequencer=change.sequencer)
        self.state = change.change if change.replace else merge_patch(self.state, change.change)
        self.next_state += 1
        self._advance_trim()
        if self.has_upstream:
            return [ToUpstream(change)]
        return [ToDevices(StateUpdate(change.sequencer, change.replace, change.change, consumed))]

    def adopt_snapshot(self, snapshot: StateSnapshot) -> list[Output]:
        """A joined downstream link's state; taken only if newer than this link's."""
        if snapshot.sequencer < self.next_state:
            return []
        below = [c for c in self.events if c < snapshot.trim]
        consumed = self._kill(
            [*below, *snapshot.tombstones], strict=False, sequencer=snapshot.sequencer
        )
        for device, trim in snapshot.device_trims.items():
            if trim > self.device_trims.get(device, 0):
                self.device_trims[device] = trim
        self.state = snapshot.state
        self.next_state = snapshot.sequencer + 1
        self._changed = True
        self._advance_trim()
        if self.has_upstream:
            return [ToUpstream(self.snapshot())]
        return [ToDevices(StateUpdate(snapshot.sequencer, True, self.state, consumed))]

    def _kill(
        self, chain_sequencers: Iterable[int], *, strict: bool, sequencer: int
    ) -> dict[str, tuple[int, ...]]:
        consumed: dict[str, list[int]] = {}
        for c in chain_sequencers:
            e = self.events.get(c)
            if e is None or e.tombstone:
                if strict or c >= self.next_chain:
                    raise ReplicationError(
                        f"state {sequencer} consumes event {c}, which this link does not hold live",
                        path="$.EventKill",
                    )
                continue
            dead = msgspec.structs.replace(e, tombstone=True)
            self.events[c] = dead
            self._dirty(dead)
            d = e.device_sequencer
            consumed.setdefault(e.device, []).append(d)
            if d > self.device_trims.get(e.device, 0):
                self.device_trims[e.device] = d
        return {dev: tuple(ds) for dev, ds in consumed.items()}

    def _advance_trim(self) -> None:
        while self.trim < self.next_chain:
            e = self.events.get(self.trim)
            if e is None or not e.tombstone:
                break
            del self.events[self.trim]
            self._upserts.pop(self.trim, None)
            per_device = self.by_device[e.device]
            del per_device[e.device_sequencer]
            if not per_device:
                del self.by_device[e.device]
            self.trim += 1
        self._changed = True

    def _dirty(self, event: Event) -> None:
        self._upserts[event.chain_sequencer] = event
        self._changed = True

    # -- compute, at the tail -------------------------------------------------------------------

    def compute(self, app: Compute) -> list[Output]:
        """Run the application once over the live events, if it is due (decision 8)."""
        if self.has_downstream or not self._compute_due:
            return []
        self._compute_due = False
        batch: list[Event] = []
        for e in self.events.values():
            if not e.tombstone:
                batch.append(e)
                if len(batch) >= self.batch_limit:
                    break
        if not batch:
            return []
        try:
            change = app(self.state, batch)
        except OctosyncError:
            raise
        except Exception as exc:
            raise ComputeContract(f"compute raised {type(exc).__name__}: {exc}") from exc
        self._check_change(change, batch)
        if not change.event_kill and not change.replace and change.change == {}:
            return []
        self._compute_due = bool(change.event_kill)
        return self.apply_state_change(msgspec.structs.replace(change, sequencer=self.next_state))

    @staticmethod
    def _check_change(change: object, batch: Sequence[Event]) -> None:
        if not isinstance(change, StateChange):
            raise ComputeContract(f"compute returned {type(change).__name__}, not a StateChange")
        offered = {e.chain_sequencer for e in batch}
        kills = change.event_kill
        if len(set(kills)) != len(kills):
            raise ComputeContract("EventKill names an event twice", path="$.EventKill")
        stray = [c for c in kills if c not in offered]
        if stray:
            raise ComputeContract(
                f"EventKill names events not offered: {stray}", path="$.EventKill"
            )
        try:
            check_json(change.change, "$.Change")
        except RemoteProtocolError as exc:
            raise ComputeContract(exc.message, path=exc.path) from None


def _device_event(event: Event) -> DeviceEvent:
    return DeviceEvent(event.device_sequencer, event.name, event.payload)
