"""A whole chain in memory: links, devices and FIFO queues between them, driven step by step.

The scenario tests and the hypothesis state machine drive the same ``Sim``: they decide which
queue delivers next, when the tail computes, and what crashes. A crashed link loses its queues
(messages in flight are gone); the survivors are rejoined as the configuration service would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import msgspec

from octosync.chain.device import DeviceClient, Phase
from octosync.chain.game import compute, consumed_sequencers
from octosync.chain.json_tree import JsonTree
from octosync.chain.link import (
    ChainLink,
    Compute,
    Output,
    ToDevice,
    ToDevices,
    ToDownstream,
    ToUpstream,
)
from octosync.chain.records import (
    BootstrapChainRequest,
    BootstrapComplete,
    DeviceEvent,
    DeviceStateMachine,
    DeviceToHead,
    HeadToDevice,
    LinkMessage,
    StateChange,
    StateUpdate,
)


class Sim:
    def __init__(self, links: int = 3, app: Compute = compute) -> None:
        self.app = app
        self.links: dict[str, ChainLink] = {}
        self.order: list[str] = []
        self.queues: dict[tuple[str, str], deque[LinkMessage]] = {}
        self.devices: dict[str, DeviceClient] = {}
        self.connected_to: dict[str, str | None] = {}
        self.bootstrapped: set[str] = set()
        """Devices whose bootstrap the head has answered; only they get notices and updates."""
        self.to_head: dict[str, deque[DeviceToHead]] = {}
        self.to_device: dict[str, deque[HeadToDevice]] = {}
        self.acked: dict[str, set[int]] = {}
        """Every sequencer any incarnation of the device was told is durable."""
        self.durable: dict[tuple[str, int], tuple[str, str]] = {}
        """(device, sequencer) -> (name, payload) of every event a tail held."""
        self.checkpoints: dict[str, DeviceStateMachine] = {}
        self.state_changes: list[StateChange] = []
        self._next_link = 0
        for _ in range(links):
            self.add_link()

    # -- chain configuration -------------------------------------------------------------------

    @property
    def head(self) -> ChainLink:
        return self.links[self.order[0]]

    @property
    def tail(self) -> ChainLink:
        return self.links[self.order[-1]]

    def add_link(self) -> str:
        """A new (or restarted) link joins at the tail with a copy of the tail's replica."""
        name = f"L{self._next_link}"
        self._next_link += 1
        if not self.order:
            self.links[name] = ChainLink()
            self.order.append(name)
            return name
        old_tail_name = self.order[-1]
        old_tail = self.links[old_tail_name]
        copy = msgspec.msgpack.decode(
            msgspec.msgpack.encode(old_tail.machine()), type=type(old_tail.machine())
        )
        link = ChainLink(copy, has_upstream=True)
        self.links[name] = link
        self.order.append(name)
        self.route(name, link.attach_upstream())
        self.route(old_tail_name, old_tail.attach_downstream(link.next_chain))
        self._note_durable(link)
        return name

    def crash_link(self, name: str) -> None:
        """SIGKILL: the link and everything in flight to or from it are gone; survivors rejoin."""
        i = self.order.index(name)
        self.order.remove(name)
        del self.links[name]
        for key in [k for k in self.queues if name in k]:
            del self.queues[key]
        for device, head in self.connected_to.items():
            if head == name:
                self.drop_connection(device)
        before = self.order[i - 1] if i > 0 else None
        after = self.order[i] if i < len(self.order) else None
        if before is None and after is not None:
            self.links[after].detach_upstream()
        elif after is None and before is not None:
            self.route(before, self.links[before].detach_downstream())
        elif before is not None and after is not None:
            self.route(after, self.links[after].attach_upstream())
            down = self.links[before].attach_downstream(self.links[after].next_chain)
            self.route(before, down)

    # -- devices ---------------------------------------------------------------------------------

    def add_device(self, name: str) -> None:
        self.devices[name] = DeviceClient(name)
        self.connected_to[name] = None
        self.acked.setdefault(name, set())

    def connect(self, device: str) -> None:
        client = self.devices[device]
        self.connected_to[device] = self.order[0]
        self.to_head[device] = deque([client.connect()])
        self.to_device[device] = deque()

    def drop_connection(self, device: str) -> None:
        self.devices[device].disconnect()
        self.connected_to[device] = None
        self.bootstrapped.discard(device)
        self.to_head.pop(device, None)
        self.to_device.pop(device, None)

    def emit(self, device: str, name: str, payload: str) -> None:
        self._send(device, self.devices[device].emit(name, payload))

    def checkpoint(self, device: str) -> None:
        """Remember the device's committed machine, as an older backup to restore later."""
        self.checkpoints[device] = self.devices[device].machine()

    def crash_device(self, device: str, *, restore: DeviceStateMachine | None) -> None:
        """The app dies; it comes back with ``restore`` (a prior commit) or nothing."""
        self.drop_connection(device)
        self.devices[device] = DeviceClient(device, restore)

    def _send(self, device: str, events: list[DeviceEvent]) -> None:
        if self.connected_to[device] is not None:
            self.to_head[device].extend(events)

    # -- delivery --------------------------------------------------------------------------------

    def pending(self) -> list[tuple[str, ...]]:
        """Every queue with something in it, as a key ``deliver`` takes."""
        keys: list[tuple[str, ...]] = [("link", a, b) for (a, b), q in self.queues.items() if q]
        keys += [("head", d) for d, q in self.to_head.items() if q]
        keys += [("device", d) for d, q in self.to_device.items() if q]
        return sorted(keys)

    def deliver(self, key: tuple[str, ...]) -> None:
        kind = key[0]
        if kind == "link":
            _, a, b = key
            message = self.queues[(a, b)].popleft()
            self.route(b, self.links[b].receive(message))
        elif kind == "head":
            device = key[1]
            msg = self.to_head[device].popleft()
            head_name = self.connected_to[device]
            assert head_name is not None
            head = self.links[head_name]
            if isinstance(msg, BootstrapChainRequest):
                self.bootstrapped.add(device)
                self.route(head_name, head.bootstrap(device, msg))
            else:
                self.route(head_name, head.receive_device_event(device, msg))
        else:
            device = key[1]
            msg2 = self.to_device[device].popleft()
            client = self.devices[device]
            self._check_consumed(device, client, msg2)
            self._send(device, client.receive(msg2))
            self.acked[device].update(client.acked)

    def _check_consumed(self, device: str, client: DeviceClient, msg: HeadToDevice) -> None:
        """A sequencer the chain calls consumed must be the very event the device holds."""
        if isinstance(msg, BootstrapComplete):
            consumed: tuple[int, ...] = msg.kill
        elif isinstance(msg, StateUpdate):
            consumed = msg.consumed.get(device, ())
        else:
            consumed = msg.consumed
        for d in consumed:
            held = client.events.get(d)
            if held is not None:
                durable = self.durable.get((device, d))
                assert durable == (held.name, held.payload), (
                    f"{device}:{d} reported consumed, but the chain consumed {durable}, "
                    f"not the device's {held.name, held.payload}"
                )

    def compute(self) -> None:
        self.route(self.order[-1], self.tail.compute(self.app))

    def route(self, name: str, outputs: list[Output]) -> None:
        i = self.order.index(name)
        for out in outputs:
            if isinstance(out, ToDownstream):
                self._queue(name, self.order[i + 1]).append(out.message)
            elif isinstance(out, ToUpstream):
                if isinstance(out.message, StateChange) and i == len(self.order) - 1:
                    self.state_changes.append(out.message)
                self._queue(name, self.order[i - 1]).append(out.message)
            elif isinstance(out, ToDevice):
                if self._reaches(out.device, name):
                    self.to_device[out.device].append(out.message)
            elif isinstance(out, ToDevices):
                for device in self.connected_to:
                    if self._reaches(device, name):
                        self.to_device[device].append(out.message)
        self._note_durable(self.tail)

    def _reaches(self, device: str, link: str) -> bool:
        return self.connected_to.get(device) == link and device in self.bootstrapped

    def _queue(self, a: str, b: str) -> deque[LinkMessage]:
        return self.queues.setdefault((a, b), deque())

    def _note_durable(self, tail: ChainLink) -> None:
        for e in tail.events.values():
            key = (e.device, e.device_sequencer)
            seen = self.durable.setdefault(key, (e.name, e.payload))
            assert seen == (e.name, e.payload), f"{key} held as {seen} and {e.name, e.payload}"

    # -- quiescence ------------------------------------------------------------------------------

    def settle(self, limit: int = 100_000) -> None:
        """Reconnect every device, deliver everything, compute until nothing is due."""
        for device, head in self.connected_to.items():
            if head is None:
                self.connect(device)
        for _ in range(limit):
            keys = self.pending()
            if keys:
                for key in keys:
                    self.deliver(key)
                continue
            before = self.tail.next_state
            self.compute()
            if self.tail.next_state == before and not self.pending():
                return
        raise AssertionError("the chain did not settle")

    def live_devices(self) -> Iterator[DeviceClient]:
        return iter(self.devices.values())

    def state(self) -> JsonTree:
        return self.tail.state

    def consumed(self, device: str) -> set[int]:
        return consumed_sequencers(self.state(), device)

    def check_settled(self) -> None:
        """The issue's invariants, once nothing is in flight."""
        tail = self.tail
        reference = tail.machine()
        for name in self.order:
            machine = self.links[name].machine()
            assert machine.events == reference.events, f"{name} holds a different log"
            assert machine.state == reference.state, f"{name} holds a different state"
            assert machine.trim == reference.trim
            assert machine.next_state_sequencer == reference.next_state_sequencer
        assert not tail.live_events(), "events left unconsumed"
        audits = (tail.state or {}).get("audit", {})
        for device, client in self.devices.items():
            assert client.phase is Phase.LIVE
            assert client.state == tail.state, f"{device} sees another state"
            assert client.state_sequencer == tail.next_state - 1
            assert not client.events, f"{device} still holds {sorted(client.events)}"
            consumed = self.consumed(device)
            missing = self.acked[device] - consumed
            assert not missing, f"{device}: acknowledged but never consumed: {sorted(missing)}"
            audit = audits.get(device, {"dup": 0, "n": 0})
            assert audit["dup"] == 0, f"{device}: {audit['dup']} events consumed twice"
            assert audit["n"] == len(consumed)
            for d in consumed:
                assert (device, d) in self.durable, f"{device}:{d} consumed, never at a tail"
