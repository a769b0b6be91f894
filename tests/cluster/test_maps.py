"""TopGun maps across a simulated cluster (sans-I/O): nodes are real ``TopGunCore`` s, the op
stream a list, the journal a list of committed records; hypothesis drives writes, deliveries,
lost publishes, restarts, lost journals and anti-entropy rounds.

Properties:

- nodes that apply the same records in different orders, with duplicates, hold identical maps
  and Merkle roots (and the state ``crdt.fold`` gives for those records);
- after the stream is drained and anti-entropy has run, every node holds exactly the fold of
  every op any node accepted, whatever was lost on the way;
- a restarted node replays the stream only from the position its journal holds, and still
  converges;
- anti-entropy alone repairs an arbitrary divergence between two nodes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from octosync.cluster.maps import (
    RECORD_OVERHEAD,
    Intake,
    Repair,
    RepairTiming,
    answer,
    cut,
    pack,
    pull,
)
from octosync.crdt.fold import MapStore, fold
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import WireTimestamp
from octosync.crdt.testing import op_histories
from octosync.crdt.timestamp import Timestamp
from octosync.server.topgun_wire import encode
from octosync.store.records import KIND_OP, EncodedRecord, decode_record, encode_record
from octosync.topgun import TopGunCore, durable
from octosync.topgun.core import record_events
from octosync.wire import cluster_maps as wire
from octosync.wire import topgun as tg
from tests.topgun.helpers import ALL, Clock, batch, put

NODES = ("a", "b", "c")
MAPS = ("users", "tags")
KEYS = ("k0", "k1", "k2", "ключ")
CONN = 1


def _records(journal: list[EncodedRecord]) -> list[OpRecord]:
    out = []
    for i, e in enumerate(journal):
        rec = decode_record(e.kind, e.body, seq=i + 1)
        assert isinstance(rec, OpRecord)
        out.append(rec)
    return out


def _user_rows(store: MapStore) -> list[tuple[str, str, bytes | None, bool]]:
    """What each key holds. An OR key's row time is left out: two removes of one tag (two
    clients removing an element at once) are one record to the fold (``rm:<tag>``), so which
    one's time the row shows depends on arrival; its value, tombstone and Merkle entry do
    not. LWW times are covered by the Merkle roots, compared beside."""
    return [
        (row.map, row.key, row.value, row.tombstone)
        for row in store.snapshot_rows()
        if not durable.is_reserved(row.map)
    ]


def _roots(store: MapStore) -> dict[str, int]:
    return {m: store.merkle_root(m) for m in MAPS}


@st.composite
def histories(draw: st.DrawFn, max_size: int = 30) -> list[OpRecord]:
    """Op records as TopGun clients make them: LWW records identified by a unique HLC, OR adds
    by a unique tag, OR removes of tags added earlier."""
    out: list[OpRecord] = []
    for i in range(draw(st.integers(0, max_size))):
        kind = draw(st.sampled_from([OpKind.PUT, OpKind.REMOVE, OpKind.OR_ADD, OpKind.OR_REMOVE]))
        ts = Timestamp(draw(st.integers(0, 5)), i, draw(st.sampled_from(NODES)))
        key = draw(st.sampled_from(KEYS))
        value = msgspec.msgpack.encode(draw(st.one_of(st.integers(-3, 3), st.text(max_size=2))))
        if kind in (OpKind.PUT, OpKind.REMOVE):
            body = value if kind is OpKind.PUT else b""
            out.append(OpRecord("users", key, kind, body, ts, ts.node_id, str(ts)))
        elif kind is OpKind.OR_ADD:
            out.append(OpRecord("tags", key, kind, value, ts, ts.node_id, f"tag-{i}"))
        else:
            added = [r.op_id for r in out if r.op is OpKind.OR_ADD and r.key == key]
            if added:
                tag = draw(st.sampled_from(added))
                tags = msgspec.msgpack.encode([tag])
                out.append(OpRecord("tags", key, kind, tags, ts, ts.node_id, f"rm:{tag}"))
    return out


@settings(max_examples=150, deadline=None)
@given(st.data(), histories())
def test_any_order_with_duplicates_gives_one_state(
    data: st.DataObject, ops: list[OpRecord]
) -> None:
    cores = [TopGunCore(Clock(), persistent=True) for _ in range(3)]
    for core in cores:
        core.replicated = True
        chunks = data.draw(st.lists(st.sampled_from(ops), max_size=len(ops) * 2)) if ops else []
        order = data.draw(st.permutations(ops))
        # Each node: its own order, in batches of its own sizes, some records twice.
        stream = list(order) + chunks
        sizes = data.draw(st.lists(st.integers(1, 5), min_size=len(stream), max_size=len(stream)))
        at = 0
        for size in sizes:
            if at >= len(stream):
                break
            core.apply_remote(stream[at : at + size])
            at += size
    expected = fold(ops)
    for core in cores:
        store = core.maps.store
        assert _user_rows(store) == _user_rows(expected)
        assert _roots(store) == {m: expected.merkle_root(m) for m in MAPS}


@settings(max_examples=150, deadline=None)
@given(st.data(), histories(40), st.integers(1, 3), st.integers(1, 4000))
def test_anti_entropy_repairs_an_arbitrary_divergence(
    data: st.DataObject, ops: list[OpRecord], max_leaves: int, max_bytes: int
) -> None:
    held = [data.draw(st.lists(st.sampled_from(ops), unique=True)) if ops else [] for _ in (0, 1)]
    stores = [fold(h, merkle_depth=3) for h in held]
    repairs = [Repair(n, lambda: 100.0, RepairTiming(max_leaves=max_leaves)) for n in ("a", "b")]
    for rounds in itertools.count():
        assert rounds < 200, "anti-entropy did not converge"
        if _roots(stores[0]) == _roots(stores[1]):
            break
        for me, other in ((0, 1), (1, 0)):
            theirs = {m: stores[other].merkle_root(m) for m in MAPS}
            for walk in repairs[me].heard("ab"[other], theirs, stores[me]):
                got = pull(walk, lambda req, o=other: answer(req, stores[o], max_bytes), stores[me])
                stores[me].apply_all(got)
                repairs[me].finished(walk)
    expected = fold(held[0] + held[1])
    for store in stores:
        assert _user_rows(store) == _user_rows(expected)
        assert _roots(store) == _roots(expected)


def test_pack_keeps_one_map_per_batch_within_the_bound_and_never_a_reserved_map() -> None:
    def rec(name: str, i: int, size: int) -> EncodedRecord:
        ts = Timestamp(i, 0, "n")
        return encode_record(OpRecord(name, f"k{i}", OpKind.PUT, b"\xa1" * size, ts, "n", str(ts)))

    records = [rec("a", 1, 100), rec("b", 2, 10), rec("a", 3, 100), rec("a", 4, 100)]
    records.append(rec(durable.COUNTERS_MAP, 5, 10))
    bound = len(records[0].body) + len(records[2].body)  # two of map a fit, not three
    batches = pack(records, max_bytes=bound)
    assert [(name, len(bodies)) for name, bodies in batches] == [("a", 2), ("a", 1), ("b", 1)]
    assert all(len(b"".join(bodies)) <= bound for _, bodies in batches)
    assert [b for _, bodies in batches for b in bodies].count(records[0].body) == 1
    assert pack([rec("big", 1, 1000)], max_bytes=300) == [("big", [rec("big", 1, 1000).body])]


def test_intake_skips_its_own_batches_sequences_passed_and_reserved_maps() -> None:
    ts = Timestamp(1, 0, "x")
    user = OpRecord("users", "k", OpKind.PUT, b"\x01", ts, "x", str(ts))
    fence = durable.fence_record(7, ts)
    intake = Intake("me", position=3)
    assert intake.take(3, wire.OpBatch("other", [user])) == []
    assert intake.take(4, wire.OpBatch("other", [user, fence])) == [user]
    assert intake.take(5, wire.OpBatch("me", [user])) == []
    assert intake.position == 5


def test_a_remote_record_reaches_subscribers_queries_and_map_streams_like_a_local_one() -> None:
    local, remote = TopGunCore(Clock(), persistent=True), TopGunCore(Clock(), persistent=True)
    for core in (local, remote):
        core.replicated = True
        core.connect(CONN, ALL)
        core.handle(CONN, tg.QuerySub(tg.QuerySubPayload("q", "users")))
        core.follow_map("users")
        core.handle(CONN, _sync_init("users"))
    writer = 2
    local.connect(writer, ALL)
    ahead = Clock().now + 30_000  # a writer's clock ahead of this node's, within the drift
    fx_local = local.handle(writer, batch(put("1", "k", {"a": 1}, ahead, node="w")))
    records = _records(fx_local.replicate)
    fx_remote = remote.apply_remote(records, position=9)
    assert [m for m in _sent(fx_local, CONN)] == [m for m in _sent(fx_remote, CONN)]
    assert fx_local.frames == fx_remote.frames
    assert _events(local.flush(), CONN) == _events(remote.flush(), CONN)
    assert [r.scope for r in fx_remote.records] == ["users", durable.CLUSTER_MAP]
    assert remote.replica_position == 9
    assert remote.hlc.last() > records[0].ts  # the receiving node's clock moved past it
    again = remote.apply_remote(records, position=9)
    assert again.records == []
    assert again.out == []
    assert not remote.has_pending_events()


def test_replicated_acks_wait_for_the_cluster_and_only_with_one() -> None:
    core = TopGunCore(Clock(), persistent=True)
    core.connect(CONN, ALL)
    alone = core.handle(CONN, batch(put("1", "k", 1, 10), write_concern="REPLICATED"))
    (ack,) = [m for m in _sent(alone, CONN) if isinstance(m, tg.OpAck)]
    assert ack.payload.achieved_level == "APPLIED"
    assert alone.replicate == []
    assert alone.replicated == []
    core.replicated = True
    fx = core.handle(CONN, batch(put("2", "k", 2, 20), write_concern="REPLICATED"))
    assert not any(isinstance(m, tg.OpAck) for m in _sent(fx, CONN))
    (held,) = [tg.decode(encode(ob.message)) for ob in fx.replicated]
    assert isinstance(held, tg.OpAck)
    assert held.payload.achieved_level == "REPLICATED"
    assert len(fx.replicate) == 1
    # Resent (unchanged here): stored in the cluster again before it is acknowledged.
    again = core.handle(CONN, batch(put("2", "k", 2, 20), write_concern="REPLICATED"))
    assert again.records == []
    assert len(again.replicate) == 1
    assert again.replicated
    plain = core.handle(CONN, batch(put("3", "k", 2, 20)))  # MEMORY, unchanged: nothing to send
    assert plain.replicate == []
    persisted = core.handle(CONN, batch(put("4", "k", 3, 30), write_concern="PERSISTED"))
    assert persisted.durable  # the session waits for both
    assert persisted.replicate


def _sync_init(name: str) -> tg.Message:
    from octosync.crdt.sync_messages import SyncInit

    return SyncInit(map_name=name)


def _sent(fx: object, conn: int) -> list[tg.Message]:
    out = getattr(fx, "out")  # noqa: B009
    return [tg.decode(encode(ob.message)) for ob in out if conn in ob.targets]


def _events(fx: object, conn: int) -> list[object]:
    msgs = _sent(fx, conn)
    events: list[object] = []
    for m in msgs:
        if isinstance(m, tg.ServerEvent):
            events.append(m.payload)
        elif isinstance(m, tg.ServerBatchEvent):
            events.extend(m.payload.events)
    return events


def test_record_events_name_each_removed_tag() -> None:
    ts = Timestamp(1, 0, "x")
    rm = OpRecord("tags", "k", OpKind.OR_REMOVE, msgspec.msgpack.encode(["t1", "t2"]), ts, "x", "r")
    assert [e.or_tag for e in record_events(rm)] == ["t1", "t2"]
    add = OpRecord("tags", "k", OpKind.OR_ADD, msgspec.msgpack.encode(1), ts, "x", "t1")
    (event,) = record_events(add)
    assert event.or_record is not None
    assert event.or_record.tag == "t1"
    assert event.or_record.timestamp == WireTimestamp.of(ts)


# --- the cluster as a state machine -------------------------------------------------------------


@dataclass
class SimNode:
    name: str
    clock: Clock
    journal: list[EncodedRecord] = field(default_factory=list)
    core: TopGunCore = field(init=False)
    intake: Intake = field(init=False)
    repair: Repair = field(init=False)

    def __post_init__(self) -> None:
        self.boot()

    def boot(self) -> None:
        """Start (again) from the journal, as ``build_app`` does."""
        self.core = TopGunCore(self.clock, persistent=True, node_id=self.name)
        self.core.replicated = True
        self.core.load(_records(self.journal))
        self.core.connect(CONN, ALL)
        self.intake = Intake(self.name, self.core.replica_position)
        self.repair = Repair(self.name, lambda: self.clock.now / 1000, RepairTiming(max_leaves=2))
        self.repair.know(self.core.maps.store.maps())


class ClusterMaps(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.clock = Clock(10_000)
        self.nodes = {n: SimNode(n, self.clock) for n in NODES}
        self.stream: list[wire.OpBatch] = []
        self.nats_up = True
        self.hlc = itertools.count(1)
        self.tags: list[tuple[str, str]] = []

    def _publish(self, node: SimNode, fx: object) -> None:
        node.journal.extend(getattr(fx, "records"))  # noqa: B009
        batches = pack(getattr(fx, "replicate"))  # noqa: B009
        node.repair.written(name for name, _ in batches)
        for _name, bodies in batches:
            if self.nats_up:  # else: lost, like a publish given up on
                decoded = wire.decode(wire.encode_batch(node.name, bodies))
                assert isinstance(decoded, wire.OpBatch)
                self.stream.append(decoded)

    @rule(
        node=st.sampled_from(NODES),
        key=st.sampled_from(KEYS),
        value=st.one_of(st.none(), st.integers(0, 9)),
        client=st.sampled_from(("c1", "c2")),
        millis=st.integers(0, 3),
    )
    def lww_write(self, node: str, key: str, value: int | None, client: str, millis: int) -> None:
        n = self.nodes[node]
        op = put("1", key, value, 1_000 + millis, node=client, counter=next(self.hlc))
        self._publish(n, n.core.handle(CONN, batch(op)))

    @rule(node=st.sampled_from(NODES), key=st.sampled_from(KEYS), value=st.integers(0, 9))
    def or_add(self, node: str, key: str, value: int) -> None:
        n = self.nodes[node]
        i = next(self.hlc)
        tag = f"t{i}"
        stamp = WireTimestamp(2_000, i, "c1")
        rec = tg.WireORRecord(msgspec.Raw(msgspec.msgpack.encode(value)), stamp, tag)
        op = tg.ClientOp(map_name="tags", key=key, id="1", op_type="OR_ADD", or_record=rec)
        self.tags.append((key, tag))
        self._publish(n, n.core.handle(CONN, batch(op)))

    @rule(node=st.sampled_from(NODES), pick=st.integers(0, 100))
    def or_remove(self, node: str, pick: int) -> None:
        if not self.tags:
            return
        key, tag = self.tags[pick % len(self.tags)]
        n = self.nodes[node]
        stamp = WireTimestamp(3_000, next(self.hlc), "c2")
        op = tg.ClientOp(
            map_name="tags", key=key, id="1", op_type="OR_REMOVE", or_tag=tag, timestamp=stamp
        )
        self._publish(n, n.core.handle(CONN, batch(op)))

    @rule(node=st.sampled_from(NODES), count=st.integers(1, 6))
    def deliver(self, node: str, count: int) -> None:
        """The node reads the next messages of the stream, in stream order, as its consumer."""
        n = self.nodes[node]
        for seq in range(
            n.intake.position + 1, min(len(self.stream), n.intake.position + count) + 1
        ):
            records = n.intake.take(seq, self.stream[seq - 1])
            n.repair.written({r.map for r in records})
            fx = n.core.apply_remote(records, n.intake.position)
            n.journal.extend(fx.records)

    @rule()
    def toggle_nats(self) -> None:
        self.nats_up = not self.nats_up

    @rule(node=st.sampled_from(NODES), lose_journal=st.booleans())
    def restart(self, node: str, lose_journal: bool) -> None:
        n = self.nodes[node]
        before = n.core.replica_position
        if lose_journal:
            n.journal.clear()
        n.boot()
        assert n.intake.position == (0 if lose_journal else before)

    @rule(src=st.sampled_from(NODES), dst=st.sampled_from(NODES))
    def anti_entropy(self, src: str, dst: str) -> None:
        self.clock.now += 5_000  # everything settled
        self._repair(self.nodes[src], self.nodes[dst])

    def _repair(self, src: SimNode, dst: SimNode) -> None:
        roots = src.repair.roots(src.core.maps.store)
        for walk in dst.repair.heard(src.name, roots, dst.core.maps.store):
            got = pull(walk, lambda r: answer(r, src.core.maps.store, 300), dst.core.maps.store)
            fx = dst.core.apply_remote(got)
            dst.journal.extend(fx.records)  # a repair is not a write: the map stays settled
            dst.repair.finished(walk)

    def teardown(self) -> None:
        if not hasattr(self, "nodes"):
            return
        nodes = list(self.nodes.values())
        for n in nodes:
            self.deliver(n.name, len(self.stream) + 1)
        accepted = [r for n in nodes for r in _records(n.journal) if not durable.is_reserved(r.map)]
        for _ in range(200):
            self.clock.now += 5_000
            if all(_roots(n.core.maps.store) == _roots(nodes[0].core.maps.store) for n in nodes):
                break
            for src, dst in itertools.permutations(nodes, 2):
                src.repair.know(src.core.maps.store.maps())
                self._repair(src, dst)
        expected = fold(accepted)
        for n in nodes:
            assert _user_rows(n.core.maps.store) == _user_rows(expected), n.name
            assert _roots(n.core.maps.store) == _roots(expected), n.name


TestClusterMaps = ClusterMaps.TestCase
TestClusterMaps.settings = settings(
    max_examples=max(300, settings.default.max_examples),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_kinds_stay_op_records() -> None:
    ts = Timestamp(1, 0, "x")
    rec = encode_record(OpRecord("users", "k", OpKind.PUT, b"\x01", ts, "x", str(ts)))
    assert rec.kind == KIND_OP


@given(op_histories(), st.integers(64, 4096))
def test_cut_keeps_every_record_in_order_within_the_bound(
    records: list[OpRecord], max_bytes: int
) -> None:
    """A map's records published at once (a journal seeded): every record once, in order,
    each batch within the bound unless one record alone is larger."""
    batches = cut(records, max_bytes)
    assert [r for b in batches for r in b] == records
    assert all(batches)
    for b in batches:
        size = sum(len(r.value) + len(r.key) + RECORD_OVERHEAD for r in b)
        assert size <= max_bytes or len(b) == 1
