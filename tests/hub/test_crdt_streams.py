"""Multi-writer plane streams: the server core's refusals, and a state machine of replicas
writing through it over links that reorder, duplicate and break."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.crdt.replicated import Replicated
from octosync.crdt.shared import SharedState, node_of
from octosync.errors import ClockDrift, CrdtValueError, Forbidden, LimitExceeded
from octosync.graph.context import Context
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.node_views import NodeRules
from octosync.hub.types import Action, AllowAll, StreamId
from octosync.ipc.messages import BlobRef, CrdtOp, CrdtSync, WireStamp

NOW = 1_000_000


class Only:
    def __init__(self, *actions: Action) -> None:
        self.actions = actions

    def allows(self, stream: StreamId, action: Action) -> bool:
        return action in self.actions


def op(peer: int, wall: int = NOW, state: bytes | BlobRef = b"1") -> CrdtOp:
    return CrdtOp(slot_id=1, stamp=WireStamp(wall, 0, peer), state=state, key="c/lww")


def test_a_writer_speaks_only_for_its_own_peer() -> None:
    streams = CrdtStreams(lambda: NOW)
    streams.join(1, "s", peer=5, grants=AllowAll())
    with pytest.raises(Forbidden) as err:
        streams.check(1, CrdtSync(ops=(op(5), op(6))))
    assert err.value.path == "ops[1].stamp.peer"
    assert streams.state_of("s") == ()


def test_writes_need_the_write_grant_and_reads_the_read_grant() -> None:
    streams = CrdtStreams(lambda: NOW)
    assert streams.join(1, "s", 5, AllowAll()) == ()
    streams.commit(streams.check(1, CrdtSync(ops=(op(5),))))
    assert streams.join(2, "s", 6, Only("write")) == ()  # no read: no state
    assert streams.join(3, "s", 7, Only("read")) == (op(5),)
    with pytest.raises(Forbidden):
        streams.check(3, CrdtSync(ops=(op(7),)))
    with pytest.raises(Forbidden):
        streams.join(4, "s", 8, Only())
    accepted = streams.commit(streams.check(2, CrdtSync(ops=(op(6, NOW + 1),))))
    assert accepted.readers == (1, 3)  # the writer without read gets only its ack
    assert accepted.ack == (op(6, NOW + 1),)


class Narrowed:
    """Every stream action, narrowed to values by node grants."""

    def __init__(self, rules: NodeRules) -> None:
        self.rules = rules

    def allows(self, stream: StreamId, action: Action) -> bool:
        return True

    def node_rules(self, stream: StreamId) -> NodeRules:
        return self.rules


def keyed(peer: int, key: str, wall: int = NOW) -> CrdtOp:
    return CrdtOp(slot_id=1, stamp=WireStamp(wall, 0, peer), state=b"1", key=key)


def test_node_grants_narrow_a_member_to_some_values() -> None:
    streams = CrdtStreams(lambda: NOW)
    streams.join(1, "s", 5, AllowAll())
    shared, secret = keyed(5, "board/lww"), keyed(5, "notes/map/plan")
    streams.commit(streams.check(1, CrdtSync(ops=(shared, secret))))
    guest = Narrowed(NodeRules(read=("board/*", "guest/*"), write=("guest/*",)))
    assert streams.join(2, "s", 6, guest) == (shared,)  # the state it may read, no more
    with pytest.raises(Forbidden) as err:
        streams.check(2, CrdtSync(ops=(keyed(6, "guest/lww"), keyed(6, "board/lww", NOW + 1))))
    assert err.value.path == "ops[1].key"
    assert "board/lww" in err.value.message
    streams.commit(streams.check(2, CrdtSync(ops=(keyed(6, "guest/lww"),))))
    newer = keyed(5, "notes/map/plan", NOW + 5)
    frontier = ((5, WireStamp(NOW - 1, 0, 5)),)
    unseen = streams.delta_for(2, CrdtSync(frontier=frontier))
    assert sorted(op.key or "" for op in unseen) == ["board/lww", "guest/lww"]  # no notes
    accepted = streams.commit(streams.check(1, CrdtSync(ops=(newer,))))
    member = streams.streams["s"].members[2]
    assert member.readable(accepted.fanout) == ()  # the guest is sent none of it


def test_a_stamp_far_ahead_of_the_server_is_refused() -> None:
    streams = CrdtStreams(lambda: NOW, max_drift_ms=1000)
    streams.join(1, "s", 5, AllowAll())
    streams.check(1, CrdtSync(ops=(op(5, NOW + 1000),)))
    with pytest.raises(ClockDrift):
        streams.check(1, CrdtSync(ops=(op(5, NOW + 1001),)))
    with pytest.raises(CrdtValueError):
        streams.check(1, CrdtSync(ops=(op(5, state=BlobRef(0, 1, 0, 0, 0)),)))
    huge = CrdtOp(slot_id=1, stamp=WireStamp(NOW, 2**53 + 1, 5), state=b"1", key="c/lww")
    with pytest.raises(LimitExceeded) as err:
        streams.check(1, CrdtSync(ops=(huge,)))
    assert err.value.path == "ops[0].stamp.logical"


def test_a_redelivered_frame_is_acked_and_fans_out_nothing() -> None:
    streams = CrdtStreams(lambda: NOW)
    streams.join(1, "s", 5, AllowAll())
    streams.join(2, "s", 6, AllowAll())
    frame = CrdtSync(ops=(op(5),))
    first = streams.commit(streams.check(1, frame))
    again = streams.commit(streams.check(1, frame))
    assert (first.fanout, first.readers) == ((op(5),), (2,))
    assert (again.fanout, again.ack) == ((), (op(5),))


def test_the_stream_outlives_its_writers() -> None:
    streams = CrdtStreams(lambda: NOW)
    streams.join(1, "s", 5, AllowAll())
    streams.commit(streams.check(1, CrdtSync(ops=(op(5),))))
    streams.leave(1)
    assert streams.join(2, "s", 6, AllowAll()) == (op(5),)


# --- the state machine ------------------------------------------------------------------------

NAMES = ("clicks", "title", "tags", "todo")
KIND = {"clicks": "pn", "title": "lww", "tags": "mv", "todo": "map"}
STREAM = "doc"


@dataclass
class Client:
    peer: int
    doc: Replicated
    connected: bool = False
    up: deque[CrdtSync] = field(default_factory=deque)
    down: deque[tuple[CrdtOp, ...]] = field(default_factory=deque)
    last: tuple[CrdtOp, ...] = ()
    unacked: dict[tuple[int, str | None], CrdtOp] = field(default_factory=dict)
    effect_runs: dict[str, int] = field(default_factory=dict)
    seen: dict[str, object] = field(default_factory=dict)


class PlaneMachine(RuleBasedStateMachine):
    """N replicas and the server core. Links are ordered (WebSocket) but interleave in any
    order across replicas, deliver a frame twice, and break (losing what was in flight);
    a replica writes while disconnected and catches up on reconnect from its frontier."""

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.server = CrdtStreams(lambda: self.now)
        self.clients: list[Client] = []
        self.added: dict[str, int] = {}
        for i in range(3):
            peer = 100 + i
            doc = Replicated(Context(), SharedState(peer, self._tick))
            client = Client(peer, doc)
            for name in NAMES:
                cell = getattr(
                    doc,
                    {"pn": "counter", "lww": "register", "mv": "multi", "map": "map"}[KIND[name]],
                )(name)
                client.effect_runs[name] = 0
                cell.on_change(self._counter(client, name))
            self.clients.append(client)
            self._connect(i)

    def _tick(self) -> int:
        self.now += 1
        return self.now

    @staticmethod
    def _counter(client: Client, name: str):  # type: ignore[no-untyped-def]
        def run(value: object) -> None:
            # the guard: an effect runs only when the observed value moved
            assert client.effect_runs[name] == 0 or client.seen[name] != value, name
            client.effect_runs[name] += 1
            client.seen[name] = value

        return run

    def _connect(self, i: int) -> None:
        c = self.clients[i]
        c.connected = True
        state = self.server.join(i, STREAM, c.peer, AllowAll())
        # on reconnect, the replica's frontier asks only for what it has not seen
        delta = self.server.delta_for(i, CrdtSync(frontier=c.doc.state.replica.frontier()))
        c.down.append(delta if c.doc.state.replica.frontier() else state)
        if c.unacked:
            c.up.append(CrdtSync(ops=tuple(c.unacked.values())))

    def _receive(self, c: Client, ops: tuple[CrdtOp, ...]) -> None:
        c.doc.merge(ops)
        for o in ops:
            if o.stamp.peer == c.peer and c.unacked.get((o.slot_id, o.key)) == o:
                del c.unacked[(o.slot_id, o.key)]

    clients_ix = st.integers(0, 2)

    @rule(i=clients_ix, amount=st.integers(-3, 5))
    def add(self, i: int, amount: int) -> None:
        self._write(i, lambda d: d.counter("clicks").add(amount))
        self.added["clicks"] = self.added.get("clicks", 0) + amount

    @rule(i=clients_ix, value=st.integers(0, 3))
    def set_title(self, i: int, value: int) -> None:
        self._write(i, lambda d: d.register("title").set(value))

    @rule(i=clients_ix, value=st.sampled_from("abc"))
    def set_tags(self, i: int, value: str) -> None:
        self._write(i, lambda d: d.multi("tags").set(value))

    @rule(i=clients_ix, field_=st.sampled_from("xy"), value=st.none() | st.integers(0, 2))
    def edit_todo(self, i: int, field_: str, value: int | None) -> None:
        if value is None:
            self._write(i, lambda d: d.map("todo").delete(field_))
        else:
            self._write(i, lambda d: d.map("todo").set(field_, value))

    def _write(self, i: int, do) -> None:  # type: ignore[no-untyped-def]
        c = self.clients[i]
        do(c.doc)
        ops = c.doc.take_outgoing()
        for o in ops:
            c.unacked[(o.slot_id, o.key)] = o
        if c.connected:
            c.up.append(CrdtSync(ops=tuple(ops)))

    @precondition(lambda self: any(c.up for c in self.clients))
    @rule(data=st.data())
    def deliver_up(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from([i for i, c in enumerate(self.clients) if c.up]))
        accepted = self.server.commit(self.server.check(i, self.clients[i].up.popleft()))
        self.clients[i].down.append(accepted.ack)
        for reader in accepted.readers:
            if accepted.fanout:
                self.clients[reader].down.append(accepted.fanout)

    @precondition(lambda self: any(c.down for c in self.clients))
    @rule(data=st.data())
    def deliver_down(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from([i for i, c in enumerate(self.clients) if c.down]))
        c = self.clients[i]
        c.last = c.down.popleft()
        self._receive(c, c.last)

    @rule(i=clients_ix)
    def redeliver(self, i: int) -> None:
        c = self.clients[i]
        before = c.doc.state.replica.ops()
        self._receive(c, c.last)
        assert c.doc.state.replica.ops() == before

    @rule(i=clients_ix)
    def disconnect(self, i: int) -> None:
        c = self.clients[i]
        if c.connected:
            self.server.leave(i)
            c.connected = False
            c.up.clear()
            c.down.clear()

    @rule(i=clients_ix)
    def reconnect(self, i: int) -> None:
        if not self.clients[i].connected:
            self._connect(i)

    @invariant()
    def counters_never_exceed_what_was_added_on_the_server(self) -> None:
        for c in self.clients:
            assert c.doc.counter("clicks").value == c.doc.state.counter("clicks")

    def teardown(self) -> None:
        # anti-entropy: everyone reconnects and every link drains
        for i in range(len(self.clients)):
            self.disconnect(i)
            self._connect(i)
        while any(c.up or c.down for c in self.clients):
            for i, c in enumerate(self.clients):
                while c.up:
                    accepted = self.server.commit(self.server.check(i, c.up.popleft()))
                    c.down.append(accepted.ack)
                    for reader in accepted.readers:
                        self.clients[reader].down.append(accepted.fanout)
                while c.down:
                    self._receive(c, c.down.popleft())
        server_state = self.server.state_of(STREAM)
        for c in self.clients:
            assert c.unacked == {}
            assert c.doc.state.replica.ops() == server_state
            assert c.doc.counter("clicks").value == self.added.get("clicks", 0)
            for name in NAMES:
                assert c.doc.state.read(name, KIND[name]) == self.clients[0].doc.state.read(
                    name, KIND[name]
                )
        assert all(o.slot_id == node_of(o.key.split("/")[0]) for o in server_state if o.key)


PlaneMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPlaneMachine = PlaneMachine.TestCase


def test_all_streams_together_are_bounded_not_only_each() -> None:
    streams = CrdtStreams(lambda: NOW, max_entries=10, max_total_entries=3)
    for conn, name in enumerate(("a", "b", "c", "d")):
        streams.join(conn, name, 5, AllowAll())
    for conn in range(3):
        streams.commit(streams.check(conn, CrdtSync(ops=(op(5),))))
    with pytest.raises(LimitExceeded):
        streams.check(3, CrdtSync(ops=(op(5),)))
    streams.check(0, CrdtSync(ops=(op(5, NOW + 1),)))  # an existing entry: no new room needed
    assert streams.total_entries == 3


def test_a_stream_nobody_wrote_is_forgotten_when_its_last_member_leaves() -> None:
    streams = CrdtStreams(lambda: NOW)
    streams.join(1, "empty", 5, AllowAll())
    streams.join(2, "kept", 6, AllowAll())
    streams.commit(streams.check(2, CrdtSync(ops=(op(6),))))
    streams.leave(1)
    streams.leave(2)
    assert set(streams.streams) == {"kept"}
