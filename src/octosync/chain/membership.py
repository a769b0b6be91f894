"""Chain membership, sans-I/O: who a link's neighbours and devices are, and what it refuses.

A link process (``links.node``) feeds this core every event (a frame on a connection, a
connection that opened or closed, a configuration read from NATS, a probe's answer) and
carries out the effects it returns: ``Send`` and ``Close`` on connections, ``Dial`` the
successor, ``Probe`` a suspect neighbour, ``RemoveMember`` by compare-and-set, ``Refresh``
the configuration, ``ReplaceReplica`` in the store, ``Stop``. It owns the ``ChainLink``, so
the chain's outputs of a batch are routed here too (``flush``), after the store committed;
only an acknowledgement relayed from downstream may leave before (``flush_relayed``).

The rules: the configuration (its epoch and member order) names each link's predecessor and
successor. The upstream link dials its successor (``PeerHello`` with its epoch); the
successor answers with its log end (``PeerWelcome``) or asks for a copy when it is joining.
Frames of an older epoch, link frames from a connection that is not a neighbour, device
frames before ``BootstrapChainRequest`` and devices on a link that is not the head are
refused (``Refused`` then close). A neighbour whose connection drops is probed; a dead one is
removed. A link that finds itself outside the configuration stops: it was fenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from octosync.chain.config import ChainConfig, Member
from octosync.chain.link import (
    ChainLink,
    Compute,
    Output,
    ToDevice,
    ToDevices,
    ToDownstream,
    ToUpstream,
)
from octosync.chain.link_frames import (
    AnyFrame,
    Copy,
    DeviceHello,
    ForDevice,
    Forward,
    FromDevice,
    LinkFrame,
    PeerHello,
    PeerWelcome,
    Refused,
    Status,
    StatusRequest,
)
from octosync.chain.records import BootstrapChainRequest, ChainAck, ChainStateMachine
from octosync.errors import NotBootstrapped, OctosyncError, StaleEpoch

ConnId = int
Kind = Literal["?", "up", "down", "device"]


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``frame`` on ``conn`` now (before the batch's commit: control frames)."""

    conn: ConnId
    frame: LinkFrame


@dataclass(frozen=True, slots=True)
class Close:
    conn: ConnId
    reason: str = ""
    """Why, when it is a refusal (logged by the I/O side)."""


@dataclass(frozen=True, slots=True)
class Dial:
    """Connect to ``member`` (our successor in ``epoch``) and report ``dialed`` or
    ``unreachable``."""

    member: Member
    epoch: int


@dataclass(frozen=True, slots=True)
class Probe:
    """Ask ``member`` for its status; report ``probed``. ``recover``: our successor's socket
    dropped (alive means: dial it again); otherwise a suspect neighbour (alive means: it
    answered and its heartbeat is live)."""

    member: Member
    epoch: int
    recover: bool


@dataclass(frozen=True, slots=True)
class RemoveMember:
    """Remove ``member`` from the configuration by compare-and-set; report the new one."""

    member: Member


@dataclass(frozen=True, slots=True)
class Refresh:
    """Read the configuration, report it, then feed ``frame`` on ``conn`` again."""

    conn: ConnId
    frame: PeerHello


@dataclass(frozen=True, slots=True)
class ReplaceReplica:
    """Store ``machine`` as the whole replica (a copy from the predecessor)."""

    machine: ChainStateMachine
    epoch: int


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str


Effect = Send | Close | Dial | Probe | RemoveMember | Refresh | ReplaceReplica | Stop


@dataclass(eq=False, slots=True)
class Peer:
    """What the core knows of one connection."""

    kind: Kind = "?"
    peer: str = ""
    since_epoch: int = 0
    bootstrapped: bool = False
    live_from: int = 0
    """Index, in the batch's outputs, of this device's BootstrapComplete (of a downstream's
    resend on its welcome): earlier outputs of the batch must not reach it."""
    attached: bool = False
    """A downstream connection whose ``PeerWelcome`` was handled: events may flow on it."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """A batch's output for some connections: encoded once, written to each."""

    conns: tuple[ConnId, ...]
    frame: LinkFrame


@dataclass
class Membership:
    me: Member
    link: ChainLink = field(default_factory=ChainLink)
    epoch: int = 0
    config: ChainConfig = field(default_factory=ChainConfig)
    waiting_copy: bool = False
    stopped: bool = False
    up: ConnId | None = None
    down: ConnId | None = None
    devices: dict[str, ConnId] = field(default_factory=dict)
    peers: dict[ConnId, Peer] = field(default_factory=dict)
    outputs: list[tuple[Output, int]] = field(default_factory=list)
    """The batch's chain outputs with the epoch they go out in (``flush`` routes them)."""
    relayed: set[int] = field(default_factory=set)
    """Indexes in ``outputs`` of what a downstream ``ChainAck`` produced (``flush_relayed``)."""
    sent_early: set[int] = field(default_factory=set)
    """Indexes in ``outputs`` that ``flush_relayed`` delivered (``flush`` skips them)."""

    # -- the configuration --------------------------------------------------------------------

    @staticmethod
    def joining(config: ChainConfig, me: Member) -> ChainConfig | None:
        """The compare-and-set step of a link that starts: create the chain, or append."""
        if not config.members:
            return ChainConfig((me,), config.epoch + 1)
        return config.with_tail(me)

    def join(self, config: ChainConfig, machine: ChainStateMachine | None) -> list[Effect]:
        """The configuration our join produced: the first link serves ``machine`` (its
        stored replica), any other waits for a copy from its predecessor."""
        if config.members == (self.me,):
            self.link = ChainLink(machine if machine is not None else ChainStateMachine())
        else:
            self.link = ChainLink(ChainStateMachine(), has_upstream=True)
            self.waiting_copy = True
        effects = self.reconfigure(config)
        self.outputs.clear()  # nothing is connected yet
        self.relayed.clear()
        return effects

    def reconfigure(self, config: ChainConfig) -> list[Effect]:
        if config.epoch <= self.epoch:
            return []
        if config.member(self.me.id) != self.me:
            self.stopped = True
            return [Stop(f"{self.me.id} is not in configuration {config.epoch}")]
        effects: list[Effect] = []
        old = self.config
        self.config, self.epoch = config, config.epoch
        was_member = old.member(self.me.id) is not None
        old_pred = old.predecessor(self.me.id) if was_member else None
        old_succ = old.successor(self.me.id) if was_member else None
        pred = config.predecessor(self.me.id)
        succ = config.successor(self.me.id)
        if pred != old_pred:
            if self.up is not None:
                effects.append(self._forget(self.up))
                self.up = None
            if pred is not None and not self.link.has_upstream:
                self.link.has_upstream = True
                effects.extend(self._forget(conn) for conn in self.devices.values())
                self.devices.clear()
        if succ != old_succ or (succ is not None and self.down is None):
            if self.down is not None:
                effects.append(self._forget(self.down))
                self.down = None
            if succ is not None:
                self.link.has_downstream = True  # stop computing at once; attach on welcome
                effects.append(Dial(succ, self.epoch))
        if not self.waiting_copy:
            self._apply_roles()
        return effects

    def neighbour(self, *, after: bool) -> Member | None:
        if self.config.member(self.me.id) is None:
            return None
        if after:
            return self.config.successor(self.me.id)
        return self.config.predecessor(self.me.id)

    def _apply_roles(self) -> None:
        if self.config.predecessor(self.me.id) is None and self.link.has_upstream:
            self.link.detach_upstream()
        if self.config.successor(self.me.id) is None and self.link.has_downstream:
            self._emit(self.link.detach_downstream())

    # -- connections --------------------------------------------------------------------------

    def accepted(self, conn: ConnId) -> list[Effect]:
        """Someone connected to us; who it is, its first frame says."""
        self.peers[conn] = Peer()
        return []

    def tick(self) -> list[Effect]:
        """Nothing arrived: a batch that only computes (the tail had more than one batch's
        worth of events to compute)."""
        return []

    def dialed(self, conn: ConnId, member: Member, epoch: int) -> list[Effect]:
        """Our dial of ``member`` connected: introduce ourselves; keep it while it is still
        our successor in ``epoch`` and we have no other."""
        self.peers[conn] = Peer("down", member.id, epoch)
        effects: list[Effect] = [Send(conn, PeerHello(epoch, self.me.id))]
        if self.down is None and epoch == self.epoch:
            self.down = conn
        else:
            effects.append(self._forget(conn))
        return effects

    def unreachable(self, member: Member, epoch: int) -> list[Effect]:
        """Every dial of our successor failed."""
        return [Probe(member, epoch, recover=False)] if epoch == self.epoch else []

    def closed(self, conn: ConnId) -> list[Effect]:
        peer = self.peers.pop(conn, None)
        if peer is None:
            return []
        effects: list[Effect] = [Close(conn)]
        if conn == self.down:
            self.down = None
            successor = self.neighbour(after=True)
            if successor is not None:
                effects.append(Probe(successor, self.epoch, recover=True))
        elif conn == self.up:
            self.up = None
            predecessor = self.neighbour(after=False)
            if predecessor is not None:
                effects.append(Probe(predecessor, self.epoch, recover=False))
        elif peer.kind == "device" and self.devices.get(peer.peer) == conn:
            del self.devices[peer.peer]
        return effects

    def probed(self, probe: Probe, alive: bool) -> list[Effect]:
        """What a probe found: a dead neighbour is removed; our live successor is dialled again
        if it is still ours and nothing else connected meanwhile."""
        if not alive:
            return [RemoveMember(probe.member)]
        if probe.recover and probe.epoch == self.epoch and self.down is None:
            return [Dial(probe.member, probe.epoch)]
        return []

    def expired(self, alive: set[str]) -> list[Effect]:
        """Heartbeats read: a neighbour whose heartbeat expired is suspect even if its sockets
        stay open (a hung process)."""
        effects: list[Effect] = []
        for after in (False, True):
            member = self.neighbour(after=after)
            if member is not None and member.id not in alive:
                effects.append(Probe(member, self.epoch, recover=False))
        return effects

    @staticmethod
    def _forget(conn: ConnId) -> Close:
        """Close ``conn``; it stays known until its reader reports it ``closed`` (and then
        counts as whatever it was: a lost successor is probed, a device is dropped)."""
        return Close(conn)

    # -- frames -------------------------------------------------------------------------------

    def receive(self, conn: ConnId, frame: AnyFrame) -> list[Effect]:
        """One frame from ``conn``. A refused frame answers ``Refused`` and closes ``conn``."""
        peer = self.peers.get(conn)
        if peer is None:  # closed meanwhile: what it sent no longer counts
            return []
        try:
            return self._frame(conn, peer, frame)
        except OctosyncError as exc:
            return [
                Send(conn, Refused(self.epoch, exc.name, str(exc))),
                Close(conn, f"{exc.name} from {peer.kind}: {exc}"),
            ]

    def _frame(self, conn: ConnId, peer: Peer, frame: AnyFrame) -> list[Effect]:
        match frame:
            case Forward():
                if conn != self.up and conn != self.down:
                    raise StaleEpoch(
                        f"a link frame from {peer.peer or 'a stranger'}, not a neighbour"
                    )
                if frame.epoch < peer.since_epoch:
                    raise StaleEpoch(
                        f"frame of epoch {frame.epoch} on a link of {peer.since_epoch}"
                    )
                produced = self.link.receive(frame.message)
                if conn == self.down and isinstance(frame.message, ChainAck):
                    start = len(self.outputs)
                    self.relayed.update(range(start, start + len(produced)))
                self._emit(produced)
            case FromDevice():
                if peer.kind != "device" or self.devices.get(peer.peer) != conn:
                    raise StaleEpoch("device frame on a connection that is not a head's device")
                if isinstance(frame.message, BootstrapChainRequest):
                    peer.bootstrapped = True
                    peer.live_from = len(self.outputs)
                    self._emit(self.link.bootstrap(peer.peer, frame.message))
                elif not peer.bootstrapped:
                    raise NotBootstrapped("DeviceEvent before BootstrapChainRequest")
                else:
                    self._emit(self.link.receive_device_event(peer.peer, frame.message))
            case PeerHello():
                return self._peer_hello(conn, peer, frame)
            case PeerWelcome():
                return self._peer_welcome(conn, peer, frame)
            case Copy():
                return self._copy(conn, frame)
            case DeviceHello():
                if self.link.has_upstream or self.waiting_copy:
                    refused = Refused(self.epoch, "NotHead", f"{self.me.id} is not the head")
                    return [Send(conn, refused), self._forget(conn)]
                effects: list[Effect] = []
                previous = self.devices.get(frame.device)
                if previous is not None:
                    effects.append(self._forget(previous))
                peer.kind, peer.peer = "device", frame.device
                self.devices[frame.device] = conn
                return effects
            case StatusRequest():
                return [Send(conn, self.status())]
            case Refused():
                return [Close(conn, f"refused by {peer.peer}: {frame.code} {frame.reason}")]
        return []

    def _peer_hello(self, conn: ConnId, peer: Peer, hello: PeerHello) -> list[Effect]:
        if hello.epoch > self.epoch:
            return [Refresh(conn, hello)]
        predecessor = self.neighbour(after=False)
        if predecessor is None or predecessor.id != hello.sender:
            raise StaleEpoch(
                f"{hello.sender} (epoch {hello.epoch}) is not the predecessor in epoch {self.epoch}"
            )
        effects: list[Effect] = []
        if self.up is not None and self.up != conn:
            effects.append(self._forget(self.up))
        peer.kind, peer.peer, peer.since_epoch = "up", hello.sender, hello.epoch
        self.up = conn
        effects.append(Send(conn, PeerWelcome(self.epoch, self.link.next_chain, self.waiting_copy)))
        if not self.waiting_copy:
            self._emit(self.link.attach_upstream())
        return effects

    def _peer_welcome(self, conn: ConnId, peer: Peer, welcome: PeerWelcome) -> list[Effect]:
        if conn != self.down or self.waiting_copy:
            return [self._forget(conn)]  # not ours, or nothing to give yet: the dial is retried
        effects: list[Effect] = []
        if welcome.need_copy:
            effects.append(Send(conn, Copy(self.epoch, self.link.machine())))
            next_chain = self.link.next_chain
        else:
            next_chain = welcome.next_chain_sequencer
        peer.attached = True
        peer.live_from = len(self.outputs)  # earlier events of this batch are in the resend
        self._emit(self.link.attach_downstream(next_chain))
        return effects

    def _copy(self, conn: ConnId, copy: Copy) -> list[Effect]:
        if conn != self.up or not self.waiting_copy:
            raise StaleEpoch("a replica copy from a link that is not our predecessor")
        self.link = ChainLink(copy.machine, has_upstream=True, has_downstream=True)
        self.waiting_copy = False
        self._apply_roles()
        self._emit(self.link.attach_upstream())
        return [ReplaceReplica(copy.machine, self.epoch)]

    # -- the batch ----------------------------------------------------------------------------

    def _emit(self, produced: list[Output]) -> None:
        epoch = self.epoch
        self.outputs.extend((out, epoch) for out in produced)

    def compute(self, app: Compute) -> None:
        """At the end of a batch: the tail computes the state of what it ingested."""
        if not self.waiting_copy:
            self._emit(self.link.compute(app))

    @property
    def compute_due(self) -> bool:
        return not self.waiting_copy and self.link.compute_due

    def flush_relayed(self) -> Iterator[Delivery]:
        """What may leave before the batch's commit: acknowledgements relayed from downstream.

        A ``ChainAck`` from downstream says the tail holds those events, and every link above
        it persisted them before forwarding them, this one included; relaying it (up, or to
        the devices at the head) promises nothing this batch's commit adds. Each goes out only
        while nothing of the batch is held back before it on the same connection, so every
        connection still receives the batch's frames in their order. This takes the links'
        commits off the acknowledgement's way up: only the way down waits for them.
        """
        if not self.relayed:
            return
        held: set[ConnId] = set()
        for i, delivery in self._route(self.outputs):
            if i in self.relayed and held.isdisjoint(delivery.conns):
                self.sent_early.add(i)
                yield delivery
            else:
                held.update(delivery.conns)

    def flush(self) -> Iterator[Delivery]:
        """The batch's outputs (once the store committed them), each for the connections it
        goes to: the attached successor, the predecessor, bootstrapped devices; none reaches a
        connection that joined after it was produced (it gets it in its own resend)."""
        outputs, self.outputs = self.outputs, []
        sent, self.sent_early = self.sent_early, set()
        self.relayed = set()
        for i, delivery in self._route(outputs):
            if i not in sent:
                yield delivery
        for conn in self.devices.values():
            peer = self.peers.get(conn)
            if peer is not None:
                peer.live_from = 0
        down_peer = None if self.down is None else self.peers.get(self.down)
        if down_peer is not None:
            down_peer.live_from = 0

    def _route(self, outputs: list[tuple[Output, int]]) -> Iterator[tuple[int, Delivery]]:
        """Each output with its index, for the connections it goes to now."""
        down_peer = None if self.down is None else self.peers.get(self.down)
        down = self.down if down_peer is not None and down_peer.attached else None
        devices = [(conn, self.peers[conn]) for conn in self.devices.values() if conn in self.peers]
        for i, (out, epoch) in enumerate(outputs):
            if isinstance(out, ToDownstream):
                # Before the welcome, attach_downstream resends from where the downstream ends.
                if down is not None and down_peer is not None and down_peer.live_from <= i:
                    yield i, Delivery((down,), Forward(epoch, out.message))
            elif isinstance(out, ToUpstream):
                if self.up is not None:
                    yield i, Delivery((self.up,), Forward(epoch, out.message))
            elif isinstance(out, ToDevice):
                conn = self.devices.get(out.device)
                peer = None if conn is None else self.peers.get(conn)
                if (
                    conn is not None
                    and peer is not None
                    and peer.bootstrapped
                    and peer.live_from <= i
                ):
                    yield i, Delivery((conn,), ForDevice(epoch, out.message))
            elif isinstance(out, ToDevices):
                targets = tuple(c for c, p in devices if p.bootstrapped and p.live_from <= i)
                if targets:
                    yield i, Delivery(targets, ForDevice(epoch, out.message))

    def status(self) -> Status:
        link = self.link
        role = "head" if link.is_head else "tail" if link.is_tail else "middle"
        if link.is_head and link.is_tail:
            role = "head+tail"
        if self.waiting_copy:
            role = "joining"
        return Status(
            self.epoch,
            self.me.id,
            role,
            link.next_chain,
            link.trim,
            link.next_state,
            link.acked_through,
            len(link.live_events()),
            len(self.devices),
            link.state,
        )
