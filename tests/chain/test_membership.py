"""Chain membership without sockets: links join, die and are removed in any order hypothesis
draws, and the chain always heals into one line of attached neighbours.

The world is a compare-and-set configuration and in-memory connections. Every effect a core
returns becomes pending work (a frame in flight, a dial, a probe, a removal, a read of the
configuration); the rules pick which pending work runs next, so every interleaving of
deliveries, deaths and reconfigurations is explored. Invariants hold after every step; at the
end the world is run until nothing is pending, and the configuration must be the live links,
each attached to the next.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.chain.config import ChainConfig, Member
from octosync.chain.game import compute
from octosync.chain.link import ChainLink
from octosync.chain.link_frames import AnyFrame, ForDevice, Forward, PeerHello
from octosync.chain.membership import (
    Close,
    Delivery,
    Dial,
    Effect,
    Membership,
    Peer,
    Probe,
    Refresh,
    RemoveMember,
    ReplaceReplica,
    Send,
    Stop,
)
from octosync.chain.records import (
    ChainAck,
    ChainStateMachine,
    DeviceNotice,
    Event,
    StateChange,
    StateUpdate,
)


@dataclass
class End:
    """One side of a connection: the node holding it and its id there."""

    node: str
    conn: int


@dataclass
class Pipe:
    a: End
    b: End
    to_b: deque[AnyFrame] = field(default_factory=deque)
    to_a: deque[AnyFrame] = field(default_factory=deque)
    closed: bool = False

    def other(self, node: str, conn: int) -> tuple[End, deque[AnyFrame]]:
        if (self.a.node, self.a.conn) == (node, conn):
            return self.b, self.to_b
        return self.a, self.to_a


@dataclass
class Node:
    core: Membership
    alive: bool = True


class World:
    def __init__(self) -> None:
        self.config = ChainConfig()
        self.nodes: dict[str, Node] = {}
        self.pipes: dict[tuple[str, int], Pipe] = {}
        self.work: list[tuple[str, str, Callable[[], None]]] = []
        self.ids = 0

    # -- nodes --------------------------------------------------------------------------------

    def member(self, name: str) -> Member:
        return Member(name, "127.0.0.1", 1000 + int(name[1:]))

    def start(self, name: str) -> None:
        me = self.member(name)
        step = Membership.joining(self.config, me)
        assert step is not None
        self.config = step
        core = Membership(me)
        self.nodes[name] = Node(core)
        machine = ChainStateMachine() if step.members == (me,) else None
        self.perform(name, core.join(step, machine))

    def live(self, name: str) -> bool:
        node = self.nodes.get(name)
        return node is not None and node.alive

    def kill(self, name: str) -> None:
        self.nodes[name].alive = False
        for (node, conn), pipe in list(self.pipes.items()):
            if node == name and not pipe.closed:
                pipe.closed = True
                other, _ = pipe.other(node, conn)
                pipe.to_a.clear()
                pipe.to_b.clear()
                self.later(
                    other.node, lambda o=other: self.feed(o.node, self.core(o).closed(o.conn))
                )

    # -- running ------------------------------------------------------------------------------

    def later(self, node: str, job: Callable[[], None], what: str = "") -> None:
        self.work.append((node, what, job))

    def run(self, index: int) -> None:
        node, _, job = self.work.pop(index % len(self.work))
        if self.live(node):
            job()

    def feed(self, name: str, effects: list[Effect]) -> None:
        if self.live(name):
            self.perform(name, effects)

    def perform(self, name: str, effects: list[Effect]) -> None:
        core = self.nodes[name].core
        for effect in effects:
            match effect:
                case Send(conn=conn, frame=frame):
                    self.send(name, conn, frame)
                case Close(conn=conn):
                    self.close(name, conn)
                case Dial(member=member, epoch=epoch):
                    self.later(
                        name, lambda m=member, e=epoch: self.dial(name, m, e), f"dial {member.id}"
                    )
                case Probe():
                    alive = self.live(effect.member.id)
                    self.later(
                        name,
                        lambda p=effect, a=alive: self.feed(name, core.probed(p, a)),
                        f"probe {effect.member.id} {alive}",
                    )
                case RemoveMember(member=member):
                    self.later(name, lambda m=member: self.remove(name, m))
                case Refresh(conn=conn, frame=frame):
                    self.later(name, lambda c=conn, f=frame: self.refresh(name, c, f))
                case ReplaceReplica():
                    pass
                case Stop():
                    self.kill(name)  # the process exits
                    return
        for delivery in core.flush_relayed():  # as the link process does: before its commit
            for conn in delivery.conns:
                self.send(name, conn, delivery.frame)
        core.compute(compute)
        for delivery in core.flush():
            for conn in delivery.conns:
                self.send(name, conn, delivery.frame)

    def send(self, name: str, conn: int, frame: AnyFrame) -> None:
        pipe = self.pipes.get((name, conn))
        if pipe is None or pipe.closed:
            return
        other, queue = pipe.other(name, conn)
        queue.append(frame)
        self.later(other.node, lambda: self.deliver(pipe, other, queue), type(frame).__name__)

    def deliver(self, pipe: Pipe, to: End, queue: deque[AnyFrame]) -> None:
        if queue:
            frame = queue.popleft()
            self.feed(to.node, self.nodes[to.node].core.receive(to.conn, frame))

    def close(self, name: str, conn: int) -> None:
        pipe = self.pipes.get((name, conn))
        if pipe is None or pipe.closed:
            return
        pipe.closed = True
        other, _ = pipe.other(name, conn)
        me = pipe.a if pipe.a.node == name and pipe.a.conn == conn else pipe.b
        for end in (me, other):  # both readers see the end
            self.later(end.node, lambda e=end: self.feed(e.node, self.core(e).closed(e.conn)))

    def core(self, end: End) -> Membership:
        return self.nodes[end.node].core

    def dial(self, name: str, member: Member, epoch: int) -> None:
        core = self.nodes[name].core
        if not self.live(member.id):
            self.feed(name, core.unreachable(member, epoch))
            return
        self.ids += 1
        mine, theirs = End(name, self.ids), End(member.id, self.ids + 100_000)
        pipe = Pipe(mine, theirs)
        self.pipes[(mine.node, mine.conn)] = self.pipes[(theirs.node, theirs.conn)] = pipe
        self.feed(member.id, self.nodes[member.id].core.accepted(theirs.conn))
        self.feed(name, core.dialed(mine.conn, member, epoch))

    def remove(self, name: str, member: Member) -> None:
        if self.config.member(member.id) == member:
            self.config = self.config.without(member.id)
        self.feed(name, self.nodes[name].core.reconfigure(self.config))

    def refresh(self, name: str, conn: int, frame: PeerHello) -> None:
        core = self.nodes[name].core
        self.feed(name, core.reconfigure(self.config))
        self.feed(name, core.receive(conn, frame))

    def poll(self, name: str) -> None:
        self.feed(name, self.nodes[name].core.reconfigure(self.config))

    def sweep(self, name: str) -> None:
        alive = {n for n in self.nodes if self.live(n)}
        self.feed(name, self.nodes[name].core.expired(alive))

    def settle(self, limit: int = 5_000) -> None:
        """Run everything pending, reading the configuration and heartbeats every few steps
        (as the links' pollers do, whatever else is going on), until a round changes
        nothing."""
        for i in range(limit):
            if self.work and i % 25:
                self.run(0)
                continue
            before = (self.config, {n: v.core.epoch for n, v in self.nodes.items()})
            had_work = bool(self.work)
            for name in [n for n in self.nodes if self.live(n)]:
                self.poll(name)
                self.sweep(name)
            after = (self.config, {n: v.core.epoch for n, v in self.nodes.items()})
            if not had_work and not self.work and before == after:
                return
        pending = [(node, what) for node, what, _ in self.work]
        raise AssertionError(f"no quiescence after {limit} steps: {pending}")


class MembershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.started = 0
        self.world.start("n0")
        self.started = 1

    def sound(self) -> list[str]:
        """Configured live links that hold the replica (a joiner's copy may not have come):
        the chain keeps one, or its state is lost and nothing can heal it."""
        w = self.world
        members = w.config.ids()
        return [n for n in members if w.live(n) and not w.nodes[n].core.waiting_copy]

    @precondition(lambda self: self.started < 6)
    @rule()
    def join(self) -> None:
        self.world.start(f"n{self.started}")
        self.started += 1

    @precondition(lambda self: len(self.sound()) >= 2)
    @rule(pick=st.integers(0, 10))
    def kill(self, pick: int) -> None:
        w = self.world
        live = [n for n in w.nodes if w.live(n)]
        victim = live[pick % len(live)]
        if [n for n in self.sound() if n != victim]:
            w.kill(victim)

    @precondition(lambda self: len(self.sound()) >= 2)
    @rule(pick=st.integers(0, 10))
    def reconfigure(self, pick: int) -> None:
        """An operator removes a member (``octosync chain remove``): it must stop."""
        w = self.world
        members = [m for m in w.config.members if w.live(m.id)]
        if not members:
            return
        victim = members[pick % len(members)]
        if [n for n in self.sound() if n != victim.id]:
            w.config = w.config.without(victim.id)

    @precondition(lambda self: bool(self.world.work))
    @rule(pick=st.integers(0, 1_000))
    def step(self, pick: int) -> None:
        self.world.run(pick)

    @rule(pick=st.integers(0, 10))
    def poll(self, pick: int) -> None:
        w = self.world
        live = [n for n in w.nodes if w.live(n)]
        if live:
            w.poll(live[pick % len(live)])

    @invariant()
    def neighbours_are_the_configured_ones(self) -> None:
        for name, node in self.world.nodes.items():
            if not node.alive:
                continue
            core = node.core
            assert core.epoch <= self.world.config.epoch
            for conn, after in ((core.up, False), (core.down, True)):
                if conn is None:
                    continue
                expected = core.neighbour(after=after)
                assert expected is not None, (name, after)
                assert core.peers[conn].peer == expected.id, (name, after)

    def teardown(self) -> None:
        w = self.world
        w.settle()
        live = [n for n in w.nodes if w.live(n)]
        if not live:
            return
        assert [m.id for m in w.config.members] == [n for n in w.config.ids() if n in live]
        members = w.config.ids()
        assert members, "live links but an empty configuration"
        for name in live:  # a link outside the configuration stopped (fenced)
            assert name in members, name
        for upper, lower in itertools.pairwise(members):
            top, bottom = w.nodes[upper].core, w.nodes[lower].core
            assert top.down is not None, (upper, members)
            pipe = w.pipes[(upper, top.down)]
            other, _ = pipe.other(upper, top.down)
            assert other.node == lower
            assert top.peers[top.down].attached
            assert bottom.up == other.conn
            assert not bottom.waiting_copy


TestMembership = MembershipMachine.TestCase
TestMembership.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)


# -- what leaves before the batch's commit ---------------------------------------------------

UP, DOWN, DEVICE = 1, 2, 3


def held(*sequencers: int) -> ChainStateMachine:
    """A replica holding device ``d``'s events 1..n as chain events 1..n."""
    events = {c: Event("d", c, c, "click", "{}") for c in sequencers}
    return ChainStateMachine(events=events, next_chain_sequencer=len(sequencers) + 1)


def linked(link: ChainLink) -> Membership:
    """A core whose link is wired as ``link`` says: an upstream, an attached downstream, and at
    the head one bootstrapped device ``d``."""
    core = Membership(Member("n2", "127.0.0.1", 1002), link=link)
    if link.has_upstream:
        core.up, core.peers[UP] = UP, Peer(kind="up", peer="n1")
    if link.has_downstream:
        core.down, core.peers[DOWN] = DOWN, Peer(kind="down", peer="n3", attached=True)
    if link.is_head:
        core.devices["d"], core.peers[DEVICE] = DEVICE, Peer("device", "d", bootstrapped=True)
    return core


def batch(core: Membership) -> tuple[list[Delivery], list[Delivery]]:
    """One batch's deliveries: before the commit, then after it."""
    return list(core.flush_relayed()), list(core.flush())


def test_a_middle_link_relays_a_downstream_ack_before_its_commit() -> None:
    core = linked(ChainLink(held(1, 2), has_upstream=True, has_downstream=True))
    core.receive(DOWN, Forward(0, ChainAck(2)))
    core.receive(DOWN, Forward(0, StateChange(change={"n": 1}, event_kill=(1,), sequencer=1)))
    early, late = batch(core)
    assert early == [Delivery((UP,), Forward(0, ChainAck(2)))]
    # the state change tombstones an event here: it goes up only once that is committed
    assert late == [
        Delivery((UP,), Forward(0, StateChange(change={"n": 1}, event_kill=(1,), sequencer=1)))
    ]


def test_the_head_tells_devices_of_a_downstream_ack_before_its_commit() -> None:
    core = linked(ChainLink(held(1, 2), has_downstream=True))
    core.receive(DOWN, Forward(0, ChainAck(2)))
    early, late = batch(core)
    assert early == [Delivery((DEVICE,), ForDevice(0, DeviceNotice(acked=(1, 2))))]
    assert late == []


def test_an_ack_behind_a_held_frame_keeps_its_place() -> None:
    """Each connection gets the batch's frames in order: an ack produced after a frame that
    waits for the commit waits too."""
    core = linked(ChainLink(held(1, 2), has_downstream=True))
    core.receive(DOWN, Forward(0, StateChange(change={"n": 1}, event_kill=(1,), sequencer=1)))
    core.receive(DOWN, Forward(0, ChainAck(2)))
    early, late = batch(core)
    assert early == []
    update = StateUpdate(1, False, {"n": 1}, {"d": (1,)})
    assert late == [
        Delivery((DEVICE,), ForDevice(0, update)),
        Delivery((DEVICE,), ForDevice(0, DeviceNotice(acked=(2,)))),  # 1 was consumed
    ]


def test_the_tails_own_ack_waits_for_its_commit() -> None:
    """The tail acknowledges what it appended in this batch: only its commit makes that true."""
    core = linked(ChainLink(held(), has_upstream=True))
    core.receive(UP, Forward(0, Event("d", 1, 1, "click", "{}")))
    early, late = batch(core)
    assert early == []
    assert Delivery((UP,), Forward(0, ChainAck(1))) in late
