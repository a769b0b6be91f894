"""Shared documents across a simulated cluster (sans-I/O): each node is a real ``CrdtStreams``
with a journal of real ``PlaneOps`` records, the op stream a list of encoded ``PlaneBatch``
messages; writers are real ``SharedState`` replicas. Hypothesis drives writes, writers moving
between nodes, publishes lost (the writer is not acknowledged and sends again), deliveries in
any interleaving and duplicated, node restarts from the journal, and anti-entropy rounds.

Properties:

- after every writer's pending ops are sent, the stream drained and one repair round run, every
  node holds the same entries, and each counter is exactly the sum of what its writers added
  (nothing lost, nothing counted twice, however often an op came);
- a restarted node replays the stream only from the position its journal holds;
- anti-entropy alone (paged at a tiny size bound) makes any two replicas equal;
- ``pack`` keeps every op, in order, within the bound.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from octosync.cluster.planes import (
    Intake,
    Repair,
    RepairTiming,
    Walk,
    answer,
    digests,
    op_size,
    pack,
    pull,
    root,
)
from octosync.crdt.plane import PlaneReplica
from octosync.crdt.shared import SharedState
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.types import AllowAll
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.store.records import KIND_PLANE, PlaneOps, decode_record, encode_record
from octosync.wire import cluster_planes as wire

DOC = "board"
NODES = ("a", "b", "c")
WRITERS = 4


@dataclass
class Node:
    name: str
    run: int = 0
    core: CrdtStreams = field(default_factory=lambda: CrdtStreams(lambda: 0))
    journal: list[bytes] = field(default_factory=list)
    intake: Intake = field(default_factory=lambda: Intake("x"))

    @property
    def boot(self) -> str:
        return f"{self.name}-{self.run}"

    def replica(self) -> PlaneReplica:
        stream = self.core.streams.get(DOC)
        return PlaneReplica() if stream is None else stream.replica

    def journal_ops(self, ops: tuple[CrdtOp, ...], position: int | None = None) -> None:
        self.journal.append(encode_record(PlaneOps(DOC, ops, position)).body)


@dataclass
class Writer:
    state: SharedState
    node: str
    conn: int
    added: int = 0
    pending: dict[tuple[int, str], CrdtOp] = field(default_factory=dict)


class ClusterPlanes(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        ticks = itertools.count(1_000)
        self.clock = lambda: next(ticks) // 3  # writers stamp alike now and then
        self.nodes = {n: Node(n) for n in NODES}
        for node in self.nodes.values():
            node.intake = Intake(node.boot)
        self.stream: list[bytes] = []  # the JetStream op stream; sequence = index + 1
        self.writers = [
            Writer(SharedState(peer, self.clock), NODES[peer % len(NODES)], conn=peer)
            for peer in range(1, WRITERS + 1)
        ]
        for w in self.writers:
            self.nodes[w.node].core.join(w.conn, DOC, w.state.peer, AllowAll())

    # --- writers --------------------------------------------------------------------------------

    @rule(w=st.integers(0, WRITERS - 1), amount=st.integers(-3, 5))
    def add(self, w: int, amount: int) -> None:
        writer = self.writers[w]
        op = writer.state.add("clicks", amount)
        writer.added += amount
        writer.pending[(op.slot_id, op.key or "")] = op  # a newer tally replaces the older

    @rule(w=st.integers(0, WRITERS - 1), value=st.integers(0, 9))
    def set(self, w: int, value: int) -> None:
        writer = self.writers[w]
        op = writer.state.set("title", value)
        writer.pending[(op.slot_id, op.key or "")] = op

    @rule(w=st.integers(0, WRITERS - 1), lost=st.booleans())
    def send(self, w: int, lost: bool) -> None:
        """The writer's node journals its pending ops and publishes them; only once JetStream
        stored them are they merged and acknowledged (a lost publish: neither)."""
        writer = self.writers[w]
        if not writer.pending:
            return
        node = self.nodes[writer.node]
        checked = node.core.check(writer.conn, CrdtSync(ops=tuple(writer.pending.values())))
        node.journal_ops(checked.ops)
        if lost:
            return
        for ops in pack(checked.ops, max_bytes=200):
            self.stream.append(wire.encode(wire.PlaneBatch(node.boot, DOC, ops)))
        accepted = node.core.commit(checked)
        for op in accepted.ack:
            writer.pending.pop((op.slot_id, op.key or ""), None)
        writer.state.receive(node.replica().ops())

    @rule(w=st.integers(0, WRITERS - 1), to=st.sampled_from(NODES))
    def move(self, w: int, to: str) -> None:
        """The writer reconnects to another node: it gets that node's state, keeps its
        pending ops."""
        writer = self.writers[w]
        self.nodes[writer.node].core.leave(writer.conn)
        writer.node = to
        self.nodes[to].core.join(writer.conn, DOC, writer.state.peer, AllowAll())
        writer.state.receive(self.nodes[to].replica().ops())

    # --- nodes ----------------------------------------------------------------------------------

    @rule(n=st.sampled_from(NODES), count=st.integers(1, 4))
    def deliver(self, n: str, count: int) -> None:
        node = self.nodes[n]
        start = node.intake.position
        for seq in range(start + 1, min(start + count, len(self.stream)) + 1):
            batch = wire.decode(self.stream[seq - 1])
            assert isinstance(batch, wire.PlaneBatch)
            ops = node.intake.take(seq, batch)
            if ops:
                changed = node.core.merge_remote(batch.stream, ops)
                node.journal_ops(changed, node.intake.position)

    @rule(n=st.sampled_from(NODES), back=st.integers(1, 3))
    def redeliver(self, n: str, back: int) -> None:
        """The consumer hands a message again: the intake takes nothing twice."""
        node = self.nodes[n]
        seq = node.intake.position - back + 1
        if seq < 1:
            return
        batch = wire.decode(self.stream[seq - 1])
        assert isinstance(batch, wire.PlaneBatch)
        assert node.intake.take(seq, batch) == ()

    @rule(n=st.sampled_from(NODES))
    def restart(self, n: str) -> None:
        """kill -9: memory gone; the journal is merged back and the stream replayed from the
        position it holds (members reconnect)."""
        old = self.nodes[n]
        node = self.nodes[n] = Node(n, run=old.run + 1, journal=old.journal)
        for body in node.journal:
            record = decode_record(KIND_PLANE, body, seq=1)
            assert isinstance(record, PlaneOps)
            node.core.restore(record.stream, record.ops)
            if record.position is not None:
                node.core.replica_position = max(node.core.replica_position, record.position)
        node.intake = Intake(node.boot, node.core.replica_position)
        for w in self.writers:
            if w.node == n:
                node.core.join(w.conn, DOC, w.state.peer, AllowAll())
                w.state.receive(node.replica().ops())

    @rule(a=st.sampled_from(NODES), b=st.sampled_from(NODES))
    def repair(self, a: str, b: str) -> None:
        self._pull(a, b)

    def _pull(self, a: str, b: str) -> None:
        if a == b:
            return
        dst, src = self.nodes[a], self.nodes[b]

        def merge(ops: list[CrdtOp]) -> None:
            changed = dst.core.merge_remote(DOC, ops)
            dst.journal_ops(changed)

        pull(Walk(DOC, b, a), lambda req: answer(req, src.replica(), 300), dst.replica(), merge)

    @invariant()
    def intake_never_passes_the_stream(self) -> None:
        for node in self.nodes.values():
            assert node.intake.position <= len(self.stream)

    def teardown(self) -> None:
        if not hasattr(self, "nodes"):
            return
        for w in range(WRITERS):  # every writer's last edits reach its node
            self.send(w, lost=False)
        for n in NODES:
            self.deliver(n, len(self.stream))
        for a in NODES:  # one round of anti-entropy: each node pulls from every other
            for b in NODES:
                self._pull(a, b)
        states = {n: node.replica().ops() for n, node in self.nodes.items()}
        assert states["a"] == states["b"] == states["c"]
        reader = SharedState(99, self.clock)
        reader.receive(states["a"])
        assert reader.counter("clicks") == sum(w.added for w in self.writers)
        assert all(not w.pending for w in self.writers)


TestClusterPlanes = ClusterPlanes.TestCase
TestClusterPlanes.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# --- repair and packing, alone ---------------------------------------------------------------

ops_strategy = st.builds(
    CrdtOp,
    slot_id=st.integers(1, 5),
    stamp=st.builds(WireStamp, st.integers(0, 4), st.integers(0, 2), st.integers(1, 3)),
    state=st.binary(max_size=40),
    key=st.sampled_from(["a/lww", "b/lww", "c/pn/1", "c/pn/2", "ключ/lww"]),
)


@given(st.lists(ops_strategy, max_size=30), st.lists(ops_strategy, max_size=30))
@settings(deadline=None)
def test_anti_entropy_alone_makes_two_replicas_equal(
    left: list[CrdtOp], right: list[CrdtOp]
) -> None:
    a, b = PlaneReplica(), PlaneReplica()
    a.merge(left)
    b.merge(right)
    pull(Walk(DOC, "b", "a"), lambda req: answer(req, b, 120), a, a.merge)
    pull(Walk(DOC, "a", "b"), lambda req: answer(req, a, 120), b, b.merge)
    assert a.ops() == b.ops()
    assert root(digests(a)) == root(digests(b))
    both = PlaneReplica()
    both.merge(left + right)
    assert a.ops() == both.ops()  # exactly the merge of both sides, nothing else


@given(st.lists(ops_strategy, max_size=30), st.randoms(use_true_random=False))
def test_digests_do_not_depend_on_merge_order(ops: list[CrdtOp], rnd: object) -> None:
    a, b = PlaneReplica(), PlaneReplica()
    a.merge(ops)
    shuffled = list(ops)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    b.merge(shuffled + shuffled[:3])
    assert digests(a) == digests(b)


@given(st.lists(ops_strategy, max_size=30))
def test_a_differing_replica_has_a_differing_root(ops: list[CrdtOp]) -> None:
    a = PlaneReplica()
    a.merge(ops)
    b = PlaneReplica()
    b.merge(ops)
    extra = CrdtOp(9, WireStamp(99, 0, 7), b"new", "z/lww")
    b.apply(extra)
    assert root(digests(a)) != root(digests(b))


@given(st.lists(ops_strategy, max_size=40), st.integers(60, 400))
def test_pack_keeps_every_op_in_order_within_the_bound(ops: list[CrdtOp], bound: int) -> None:
    batches = pack(ops, bound)
    assert [op for batch in batches for op in batch] == ops
    for batch in batches:
        assert len(batch) == 1 or sum(op_size(op) for op in batch) <= bound


def test_a_node_pulls_only_settled_documents_it_differs_on() -> None:
    now = [0.0]
    repair = Repair("a", lambda: now[0], RepairTiming(interval=1.0, settle=2.0))
    ours, theirs = PlaneReplica(), PlaneReplica()
    theirs.apply(CrdtOp(1, WireStamp(1, 0, 1), b"1", "x/lww"))
    replicas = {DOC: ours}
    repair.written([DOC])
    assert repair.heard("b", {DOC: root(digests(theirs))}, replicas) == []  # written just now
    now[0] = 3.0
    walks = repair.heard("b", {DOC: root(digests(theirs))}, replicas)
    assert [(w.stream, w.peer) for w in walks] == [(DOC, "b")]
    assert repair.heard("b", {DOC: root(digests(theirs))}, replicas) == []  # already pulling
    repair.finished(walks[0])
    assert repair.heard("b", {DOC: root(digests(ours))}, replicas) == []  # equal roots
    assert repair.heard("a", {DOC: root(digests(theirs))}, replicas) == []  # its own
    assert repair.roots({DOC: theirs, "empty": PlaneReplica()}) == {DOC: root(digests(theirs))}


@given(st.lists(ops_strategy, max_size=20), st.lists(ops_strategy, min_size=1, max_size=5))
def test_kept_digests_follow_every_change(first: list[CrdtOp], later: list[CrdtOp]) -> None:
    repair = Repair("a", lambda: 0.0)
    replica = PlaneReplica()
    replica.merge(first)
    assert repair.sums(DOC, replica) == digests(replica)
    replica.merge(later)  # whatever won, the kept digests are the replica's again
    assert repair.sums(DOC, replica) == digests(replica)
