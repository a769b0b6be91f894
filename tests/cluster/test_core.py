"""The cluster core against a simulated cluster: three nodes, lossy ordered links, a
compare-and-set store, crashes and a clock, all driven by hypothesis.

Each node has a small model of its hub's rules for one stream (one producer at a time; a
snapshot first, then deltas from the epoch reached), so the properties are the hub's:

- the core never hands its hub a remote delta the hub would refuse (no gaps reach the hub);
- every remote frame a node applies was sent under a claim its sender really won;
- no two nodes publish under the same claim, and a node publishes only under a claim it won;
- once the links are drained and the clock has moved on, every live node that follows a live
  owner holds exactly the owner's state.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from octosync.cluster.core import (
    Apply,
    Claim,
    ClusterCore,
    ClusterTiming,
    DropRemote,
    Effect,
    Forward,
    Hold,
    Kick,
    PublishHeld,
    PublishSnapshot,
    Release,
    RequestSnapshot,
)
from octosync.wire.cluster import ClusterFrame

S = "s"
NODES = ("a", "b", "c")
TIMING = ClusterTiming(heartbeat_every=0.5, dead_after=2.5, retry_after=1.0, max_buffered=8)


@dataclass
class HubModel:
    """One stream in a node's hub: who produces it and the state (a chain id and epoch)."""

    producer: object = None
    """None, ``("local", conn)`` or ``("remote", node)``."""
    chain: str | None = None
    epoch: int | None = None


@dataclass
class Sim:
    name: str
    core: ClusterCore
    hub: HubModel = field(default_factory=HubModel)
    alive: bool = True
    conn: int | None = None
    """This node's local producer connection, if any."""
    follows: bool = True
    """The node has local subscribers of the stream."""


class ClusterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.nodes: dict[str, Sim] = {}
        self.links: dict[tuple[str, str], list[ClusterFrame]] = {}
        self.watch: dict[str, list[tuple[str | None, int]]] = {}
        self.kv_ops: list[tuple[str, Claim | Release]] = []
        self.requests: list[tuple[str, str]] = []
        self.held: dict[str, list[tuple[str, int, int]]] = {}
        self.kv: tuple[str | None, int] = (None, 0)
        self.revision = 0
        self.won: dict[int, str] = {}
        self.published: dict[int, set[str]] = {}
        self.conns = itertools.count(1)
        self.chains = itertools.count(1)

    def clock(self) -> float:
        return self.now

    @initialize()
    def start(self) -> None:
        for n in NODES:
            self.nodes[n] = Sim(n, ClusterCore(n, self.clock, TIMING))
            assert self.nodes[n].core.follow(S) == []  # no owner yet: nothing to ask
            self.watch[n] = []
            for m in NODES:
                if m != n:
                    self.links[(n, m)] = []

    # --- performing effects, as the link does ------------------------------------------------

    def run(
        self, sim: Sim, effects: list[Effect], frame: tuple[str, int, int] | None = None
    ) -> None:
        for effect in effects:
            match effect:
                case Forward(claim=claim):
                    assert frame is not None
                    chain, frm, to = frame
                    self.send(sim, claim, "delta", frm, to, chain)
                case Hold(first=first):
                    assert frame is not None
                    if first:
                        assert frame[1] == frame[2], "held frames start with a snapshot"
                        self.held[sim.name] = [frame]
                    else:
                        self.held[sim.name].append(frame)
                case PublishHeld(claim=claim):
                    for i, (chain, frm, to) in enumerate(self.held.pop(sim.name)):
                        self.send(sim, claim, "snapshot" if i == 0 else "delta", frm, to, chain)
                case PublishSnapshot(claim=claim):
                    assert sim.hub.epoch is not None
                    assert sim.hub.chain is not None
                    self.send(sim, claim, "snapshot", sim.hub.epoch, sim.hub.epoch, sim.hub.chain)
                case Claim(last=last):
                    held_by = self.won.get(last) if last else None
                    assert held_by in (None, sim.name) or not self.heard_lately(sim, held_by), (
                        f"{sim.name} claims over {held_by}, which it heard from lately"
                    )
                    self.kv_ops.append((sim.name, effect))
                case Release():
                    self.kv_ops.append((sim.name, effect))
                case Kick(conn=conn):
                    if sim.hub.producer == ("local", conn):
                        sim.hub.producer = None
                    if sim.conn == conn:
                        sim.conn = None
                case Apply(frame=f):
                    self.apply(sim, f)
                case DropRemote():
                    if isinstance(sim.hub.producer, tuple) and sim.hub.producer[0] == "remote":
                        sim.hub.producer = None
                case RequestSnapshot(owner=owner):
                    self.requests.append((sim.name, owner))

    def heard_lately(self, sim: Sim, other: str) -> bool:
        seen = sim.core.last_seen.get(other)
        return seen is not None and self.now - seen < TIMING.dead_after

    def send(self, sim: Sim, claim: int, kind: str, frm: int, to: int, chain: str) -> None:
        assert self.won.get(claim) == sim.name, "published under a claim it did not win"
        self.published.setdefault(claim, set()).add(sim.name)
        assert self.published[claim] == {sim.name}
        body = chain.encode()
        f = ClusterFrame(sim.name, S, claim, kind, frm, to, body)  # type: ignore[arg-type]
        for m in NODES:
            if m != sim.name:
                self.links[(sim.name, m)].append(f)

    def apply(self, sim: Sim, f: ClusterFrame) -> None:
        hub = sim.hub
        assert self.won.get(f.claim) == f.node, "applied a frame of a claim never won"
        assert sim.follows, f"{sim.name} applied a frame of a stream nobody reads there"
        producer = ("remote", f.node)
        assert hub.producer in (None, producer), f"remote frame while {hub.producer} produces"
        if f.kind == "snapshot":
            hub.producer, hub.chain, hub.epoch = producer, f.body.decode(), f.to_epoch
            return
        assert hub.producer == producer, "a delta before the remote owner's snapshot"
        assert hub.chain == f.body.decode(), "a delta of another chain"
        assert hub.epoch == f.from_epoch, f"gap: hub at {hub.epoch}, delta from {f.from_epoch}"
        hub.epoch = f.to_epoch

    # --- producers -----------------------------------------------------------------------------

    def live(self) -> list[str]:
        return [n for n in NODES if self.nodes[n].alive]

    def free(self) -> list[str]:
        """Live nodes whose hub would take a new producer (nobody produces there)."""
        return [
            n for n in self.live() if self.nodes[n].conn is None and not self.nodes[n].hub.producer
        ]

    def producing(self) -> list[str]:
        return [
            n
            for n in self.live()
            if self.nodes[n].conn is not None
            and self.nodes[n].hub.producer == ("local", self.nodes[n].conn)
        ]

    @precondition(lambda self: self.free())
    @rule(data=st.data())
    def producer_joins(self, data: st.DataObject) -> None:
        sim = self.nodes[data.draw(st.sampled_from(self.free()))]
        sim.conn = next(self.conns)
        chain = f"{sim.name}{next(self.chains)}"
        epoch = data.draw(st.integers(0, 5))
        sim.hub.producer, sim.hub.chain, sim.hub.epoch = ("local", sim.conn), chain, epoch
        self.run(sim, sim.core.local_frame(S, sim.conn), (chain, epoch, epoch))

    @precondition(lambda self: self.producing())
    @rule(data=st.data(), steps=st.integers(1, 3))
    def producer_flushes(self, data: st.DataObject, steps: int) -> None:
        sim = self.nodes[data.draw(st.sampled_from(self.producing()))]
        for _ in range(steps):
            assert sim.hub.epoch is not None
            assert sim.hub.chain is not None
            frm = sim.hub.epoch
            sim.hub.epoch = frm + 1
            self.run(sim, sim.core.local_frame(S, sim.conn), (sim.hub.chain, frm, frm + 1))

    @precondition(lambda self: any(self.nodes[n].conn is not None for n in self.live()))
    @rule(data=st.data())
    def producer_leaves(self, data: st.DataObject) -> None:
        with_conn = [n for n in self.live() if self.nodes[n].conn is not None]
        sim = self.nodes[data.draw(st.sampled_from(with_conn))]
        if sim.hub.producer == ("local", sim.conn):
            sim.hub.producer = None
        sim.conn = None

    # --- the network, the store, the clock ----------------------------------------------------

    @precondition(lambda self: any(self.links.values()))
    @rule(data=st.data(), lose=st.sampled_from([False, False, False, True]))
    def deliver(self, data: st.DataObject, lose: bool) -> None:
        pending = [k for k, q in self.links.items() if q]
        src, dst = data.draw(st.sampled_from(pending))
        f = self.links[(src, dst)].pop(0)
        sim = self.nodes[dst]
        if sim.alive and not lose:
            self.run(sim, sim.core.remote_frame(f))

    @precondition(lambda self: self.kv_ops)
    @rule(data=st.data())
    def store_step(self, data: st.DataObject) -> None:
        if self.kv_ops:
            self.store_step_at(data.draw(st.integers(0, len(self.kv_ops) - 1)))

    def commit(self, owner: str | None) -> None:
        self.revision += 1
        self.kv = (owner, self.revision)
        if owner is not None:
            self.won[self.revision] = owner
        for n in NODES:
            self.watch[n].append(self.kv)

    @precondition(lambda self: any(self.watch.values()))
    @rule(data=st.data())
    def watch_step(self, data: st.DataObject) -> None:
        pending = [n for n in NODES if self.watch[n]]
        n = data.draw(st.sampled_from(pending))
        owner, rev = self.watch[n].pop(0)
        sim = self.nodes[n]
        if sim.alive:
            self.run(sim, sim.core.ownership(S, owner, rev))

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def answer_request(self, data: st.DataObject) -> None:
        if self.requests:
            self.answer_at(data.draw(st.integers(0, len(self.requests) - 1)))

    @rule()
    def heartbeats(self) -> None:
        for n in self.live():
            sim = self.nodes[n]
            claim = sim.core.owns(S)
            owned = {} if claim is None or sim.hub.epoch is None else {S: (claim, sim.hub.epoch)}
            released = sim.core.released_claims()
            for m in self.live():
                self.run(self.nodes[m], self.nodes[m].core.heartbeat(n, owned, released))

    @rule(dt=st.sampled_from([0.1, 0.5, 1.0, 3.0]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        for n in self.live():
            sim = self.nodes[n]
            for stream, conn in sim.core.local_producers().items():
                if sim.hub.producer != ("local", conn):
                    self.run(sim, sim.core.local_released(stream))
            self.run(sim, sim.core.tick())

    @rule(data=st.data())
    def interest_changes(self, data: st.DataObject) -> None:
        """The node's first subscriber arrives, or its last leaves."""
        sim = self.nodes[data.draw(st.sampled_from(self.live()))]
        sim.follows = not sim.follows
        core = sim.core
        self.run(sim, core.follow(S) if sim.follows else core.unfollow(S))
        if not sim.follows:
            assert sim.hub.producer is None or sim.hub.producer[0] == "local"  # type: ignore[index]

    @precondition(lambda self: len(self.live()) == len(NODES))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        sim = self.nodes[data.draw(st.sampled_from(NODES))]
        sim.alive = False

    # --- properties ----------------------------------------------------------------------------

    @invariant()
    def one_claim_one_owner(self) -> None:
        for claim, who in self.published.items():
            assert who == {self.won[claim]}

    @rule()
    def settle_and_compare(self) -> None:
        """Drain everything without loss, let time pass, then compare with the owner."""
        for _ in range(12):
            self.heartbeats()
            for key in self.links:
                while self.links[key]:
                    f = self.links[key].pop(0)
                    sim = self.nodes[key[1]]
                    if sim.alive:
                        self.run(sim, sim.core.remote_frame(f))
            while self.kv_ops or any(self.watch.values()):
                while self.kv_ops:
                    self.store_step_at(0)
                for n in NODES:
                    while self.watch[n]:
                        owner, rev = self.watch[n].pop(0)
                        if self.nodes[n].alive:
                            self.run(self.nodes[n], self.nodes[n].core.ownership(S, owner, rev))
            while self.requests:
                self.answer_at(0)
            self.time_passes(1.0)
        for n in self.live():
            producer = self.nodes[n].hub.producer
            if isinstance(producer, tuple) and producer[0] == "remote":
                assert self.nodes[producer[1]].alive, f"{n} still follows {producer[1]}, crashed"
        owner, _ = self.kv
        if owner is None or not self.nodes[owner].alive or self.nodes[owner].core.owns(S) is None:
            return
        o = self.nodes[owner]
        for n in self.live():
            if n == owner or not self.nodes[n].follows:
                continue
            sim = self.nodes[n]
            assert (sim.hub.chain, sim.hub.epoch) == (o.hub.chain, o.hub.epoch), (
                f"{n} holds {sim.hub.chain}@{sim.hub.epoch}, owner {owner} "
                f"{o.hub.chain}@{o.hub.epoch}"
            )
            assert sim.core.lag(S) == 0

    def store_step_at(self, i: int) -> None:
        node, op = self.kv_ops.pop(i)
        sim = self.nodes[node]
        owner, rev = self.kv
        if isinstance(op, Claim):
            ok = (op.last == 0 and owner is None) or (op.last != 0 and op.last == rev)
            if ok:
                self.commit(node)
            if sim.alive:
                self.run(sim, sim.core.claim_result(S, self.revision if ok else None))
        elif op.last == rev:
            self.commit(None)

    def answer_at(self, i: int) -> None:
        asker, owner = self.requests.pop(i)
        a, o = self.nodes[asker], self.nodes[owner]
        if not a.alive:
            return
        claim = o.core.owns(S) if o.alive else None
        if claim is None or o.hub.epoch is None or o.hub.chain is None:
            self.run(a, a.core.snapshot_reply(S, None))
            return
        f = ClusterFrame(
            owner, S, claim, "snapshot", o.hub.epoch, o.hub.epoch, o.hub.chain.encode()
        )
        self.run(a, a.core.snapshot_reply(S, f))


TestCluster = ClusterMachine.TestCase
TestCluster.settings = settings(
    max_examples=max(300, settings.default.max_examples),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --- single decisions, by example ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def frame(node: str, claim: int, kind: str, frm: int, to: int) -> ClusterFrame:
    return ClusterFrame(node, S, claim, kind, frm, to, b"")  # type: ignore[arg-type]


def following(claim: int = 1, epoch: int = 3) -> tuple[ClusterCore, Clock]:
    """Node ``b`` following ``a``'s stream under ``claim`` at ``epoch``."""
    clock = Clock()
    core = ClusterCore("b", clock, TIMING)
    core.follow(S)
    core.ownership(S, "a", claim)
    assert core.remote_frame(frame("a", claim, "snapshot", epoch, epoch)) == [
        Apply(frame("a", claim, "snapshot", epoch, epoch))
    ]
    return core, clock


def test_a_stale_or_duplicate_delta_is_dropped_without_a_resync() -> None:
    core, _ = following(epoch=3)
    assert core.remote_frame(frame("a", 1, "delta", 2, 3)) == []
    assert core.stats.stale == 1
    assert core.stats.snapshot_requests == 0


def test_a_gap_buffers_asks_the_owner_and_resumes_after_the_snapshot() -> None:
    core, _ = following(epoch=3)
    assert core.remote_frame(frame("a", 1, "delta", 4, 5)) == [RequestSnapshot(S, "a")]
    assert core.remote_frame(frame("a", 1, "delta", 5, 6)) == []
    snap = frame("a", 1, "snapshot", 5, 5)
    assert core.snapshot_reply(S, snap) == [Apply(snap), Apply(frame("a", 1, "delta", 5, 6))]
    assert core.lag(S) == 0


def test_frames_of_a_superseded_claim_are_fenced() -> None:
    core, _ = following(claim=1, epoch=3)
    core.ownership(S, "c", 2)
    assert core.remote_frame(frame("a", 1, "delta", 3, 4)) == []
    assert core.stats.fenced == 1


def test_a_new_claim_of_the_same_node_restarts_from_its_snapshot() -> None:
    core, _ = following(claim=1, epoch=3)
    core.ownership(S, "a", 2)  # the producer left and another took the stream on node a
    assert core.remote_frame(frame("a", 2, "delta", 3, 4)) == [RequestSnapshot(S, "a")]


def test_a_local_producer_is_refused_while_the_owner_is_heard_and_claims_once_it_is_not() -> None:
    core, clock = following(claim=1, epoch=3)
    assert core.heartbeat("a", {S: (1, 3)}) == []
    assert core.local_frame(S, 7) == [Kick(S, 7)]
    clock.now += TIMING.dead_after
    assert core.tick() == [DropRemote(S)]
    assert core.local_frame(S, 8) == [Claim(S, 1), Hold(S, first=True)]
    assert core.local_frame(S, 8) == [Hold(S, first=False)]
    assert core.stats.takeovers == 1
    assert core.claim_result(S, 5) == [PublishHeld(S, 5)]
    assert core.local_frame(S, 8) == [Forward(S, 5)]
    assert core.local_released(S) == [Release(S, 5)]


def test_writes_go_to_the_live_owner_under_its_claim_and_nowhere_else() -> None:
    core, clock = following(claim=4, epoch=3)
    core.heartbeat("a", {S: (4, 3)})
    assert core.write_target(S) == ("a", 4)
    assert core.write_target("other") is None
    clock.now += TIMING.dead_after
    assert core.write_target(S) is None  # presumed dead: dropped, as with no producer


def test_an_owner_whose_heartbeat_no_longer_lists_the_stream_released_it() -> None:
    core, _ = following(claim=2, epoch=3)
    assert core.heartbeat("a", {S: (2, 3)}) == []
    assert core.heartbeat("a", {}) == [DropRemote(S)]
    assert core.local_frame(S, 9) == [Claim(S, 0), Hold(S, first=True)]


def test_a_heartbeat_older_than_the_claim_releases_nothing() -> None:
    clock = Clock()
    core = ClusterCore("b", clock, TIMING)
    core.follow(S)
    core.ownership(S, "a", 2)  # the watch was quicker than the owner's first frame
    assert core.heartbeat("a", {}) == []
    assert core.remote_frame(frame("a", 2, "snapshot", 0, 0)) == [
        Apply(frame("a", 2, "snapshot", 0, 0))
    ]


def test_an_owner_keeps_a_snapshot_only_when_its_epoch_moved() -> None:
    core = ClusterCore("a", Clock(), TIMING)
    core.local_frame(S, 1)
    assert core.checkpoints_due({S: 4}) == []  # not owned until the claim is won
    core.claim_result(S, 1)
    assert core.checkpoints_due({S: 4}) == [S]
    assert core.checkpoints_due({S: 4}) == []
    assert core.checkpoints_due({S: 5, "other": 9}) == [S]


def test_a_claim_won_after_the_producer_left_drops_the_remote_owner_it_followed_meanwhile() -> None:
    """The local producer leaves while its claim is on its way; the node follows ``c`` in the
    meantime; the claim then wins (``c`` had released) and is released at once. The hub must
    not keep ``c``'s producer connection: the next owner's frames would meet it."""
    core = ClusterCore("b", Clock(), TIMING)
    core.follow(S)
    assert core.local_frame(S, 7) == [Claim(S, 0), Hold(S, first=True)]
    assert core.local_released(S) == []
    snap = frame("c", 1, "snapshot", 2, 2)
    assert core.remote_frame(snap) == [Apply(snap)]
    assert core.claim_result(S, 3) == [DropRemote(S), Release(S, 3)]
    next_owner = frame("a", 5, "snapshot", 0, 0)
    assert core.remote_frame(next_owner) == [Apply(next_owner)]


def test_a_node_without_subscribers_applies_nothing_but_knows_the_owner() -> None:
    core = ClusterCore("b", Clock(), TIMING)
    core.ownership(S, "a", 1)
    core.heartbeat("a", {S: (1, 3)})
    assert core.remote_frame(frame("a", 1, "snapshot", 3, 3)) == []
    assert core.remote_frame(frame("a", 1, "delta", 3, 4)) == []
    assert core.write_target(S) == ("a", 1)
    assert core.tick() == []  # nothing to ask for while nobody reads it here
    assert core.follow(S) == [RequestSnapshot(S, "a")]
    assert core.follow(S) == []  # a second subscriber changes nothing
    snap = frame("a", 1, "snapshot", 4, 4)
    assert core.snapshot_reply(S, snap) == [Apply(snap)]
    assert core.remote_frame(frame("a", 1, "delta", 4, 5)) == [Apply(frame("a", 1, "delta", 4, 5))]
    assert core.following() == [S]


def test_the_last_subscriber_leaving_drops_the_remote_producer_and_the_next_one_resyncs() -> None:
    core, clock = following(claim=1, epoch=3)
    assert core.unfollow(S) == [DropRemote(S)]
    assert core.unfollow(S) == []
    assert core.remote_frame(frame("a", 1, "delta", 3, 4)) == []
    assert core.lag(S) is None
    clock.now += TIMING.retry_after
    assert core.tick() == []
    assert core.follow(S) == [RequestSnapshot(S, "a")]
    assert core.snapshot_reply(S, frame("a", 1, "snapshot", 4, 4)) == [
        Apply(frame("a", 1, "snapshot", 4, 4))
    ]
    assert core.lag(S) == 0


def test_a_live_remote_owner_refuses_producers_here_until_it_is_presumed_dead() -> None:
    core, clock = following(claim=1, epoch=3)
    core.heartbeat("a", {S: (1, 3)})
    assert core.produced_elsewhere(S) == "a"
    assert core.produced_elsewhere("other") is None
    clock.now += TIMING.dead_after
    assert core.produced_elsewhere(S) is None
    own = ClusterCore("a", Clock(), TIMING)
    own.local_frame(S, 1)
    own.claim_result(S, 1)
    assert own.produced_elsewhere(S) is None


def test_heartbeats_tell_a_node_without_subscribers_of_claims_and_releases() -> None:
    """With the KV watch lost (a NATS restart), a node that follows nothing still learns
    who owns a stream, and that it was released, from the owner's heartbeats."""
    core = ClusterCore("b", Clock(), TIMING)
    assert core.heartbeat("a", {}) == []
    assert core.heartbeat("a", {S: (4, 7)}) == []
    assert core.produced_elsewhere(S) == "a"
    assert core.write_target(S) == ("a", 4)
    assert core.heartbeat("a", {S: (2, 9)}) == []  # an older claim changes nothing
    assert core.heartbeat("a", {}) == []  # released
    assert core.produced_elsewhere(S) is None
    assert core.local_frame(S, 5) == [Claim(S, 0), Hold(S, first=True)]  # the entry is gone


def test_a_heartbeat_sent_before_the_claim_was_won_releases_nothing() -> None:
    core = ClusterCore("b", Clock(), TIMING)
    core.ownership(S, "a", 3)  # the watch shows the claim before a's next heartbeat lists it
    core.heartbeat("a", {})
    assert core.produced_elsewhere(S) == "a"


def test_a_release_in_a_heartbeat_frees_the_stream_on_a_node_that_missed_everything_else() -> None:
    """NATS restarted: ``b``'s ownership watch is gone and ``a``'s heartbeats never listed
    the stream there before its producer left; the release named in them still frees it."""
    clock = Clock()
    a, b = ClusterCore("a", clock, TIMING), ClusterCore("b", clock, TIMING)
    b.ownership(S, "a", 3)
    a.local_frame(S, 1)
    assert a.claim_result(S, 3) == [PublishHeld(S, 3)]
    assert a.released_claims() == {}
    assert a.local_released(S) == [Release(S, 3)]
    a.ownership(S, None, 4)  # a's own watch sees its delete
    assert a.released_claims() == {S: 3}
    b.heartbeat("a", {}, {S: 2})  # not the claim b knows: nothing
    assert b.produced_elsewhere(S) == "a"
    b.heartbeat("a", {}, a.released_claims())
    assert b.produced_elsewhere(S) is None
    clock.now += 4 * TIMING.dead_after + 0.1
    assert a.released_claims() == {}


def test_a_copy_from_another_node_is_refused_to_late_joiners_only_while_unlinked() -> None:
    core, _ = following(claim=1, epoch=3)
    assert core.stale_reason(S, linked=True) is None
    reason = core.stale_reason(S, linked=False)
    assert reason is not None
    assert "'b' cannot reach the cluster" in reason
    assert core.stale_reason("never-seen", linked=False) is None  # nobody else's copy
    mine = ClusterCore("a", Clock(), TIMING)
    mine.local_frame(S, 7)
    mine.claim_result(S, 1)
    assert mine.stale_reason(S, linked=False) is None  # its own producer's stream: current
