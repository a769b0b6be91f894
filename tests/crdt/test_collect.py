"""Collecting stable tombstones: replicas editing a list and a text through the server core over
ordered, delayed links, with collection steps and journal replays interleaved; and a writer
away past the bound."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.crdt import collect
from octosync.crdt.shared import SharedState, document_values, node_of
from octosync.errors import ElementCollected, Forbidden
from octosync.hub.crdt_streams import Checked, CrdtStreams
from octosync.hub.types import AllowAll
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp

DOC = "doc"
LIST = "todo"
TEXT = "notes"


def tombstones(ops: tuple[CrdtOp, ...] | list[CrdtOp]) -> int:
    return sum(1 for op in ops if (op.key or "").startswith(f"{LIST}/ld/"))


def visible(ops: tuple[CrdtOp, ...]) -> tuple[object, ...]:
    """The list as a replica holding ``ops`` reads it (empty when it holds none of it)."""
    state = SharedState(1, lambda: 0)
    state.receive(ops)
    return state.list_values(LIST)


def text_tombstones(ops: tuple[CrdtOp, ...]) -> int:
    """Deleted characters a replica holding ``ops`` keeps."""
    state = SharedState(1, lambda: 0)
    state.receive(ops)
    return state.text_of(TEXT).crdt.tombstones()


def unjustified(ops: tuple[CrdtOp, ...]) -> list[tuple[int, int]]:
    """Deleted characters held that the rule lets go: in a chunk its writer has left, named by
    no character held (neither the next one of its run nor a run's origin)."""
    runs: dict[tuple[int, int], list[tuple[int, str, int, int]]] = {}
    deleted: set[tuple[int, int]] = set()
    for op in ops:
        parts = (op.key or "").split("/")
        if parts[0] != TEXT or len(parts) != 4:
            continue
        rows = json.loads(op.state)
        if parts[1] == "tx":
            runs[(int(parts[2]), int(parts[3]))] = rows
        else:
            deleted |= {(p, c + i) for p, c, n in rows for i in range(n)}
    top: dict[int, int] = {}
    for peer, chunk in runs:
        top[peer] = max(top.get(peer, -1), chunk)
    origins = {(op_, oc) for rows in runs.values() for _, _, op_, oc in rows}
    out = []
    for (peer, chunk), rows in runs.items():
        for clock, chars, _, _ in rows:
            for i in range(len(chars)):
                c = clock + i
                if (
                    (peer, c) in deleted
                    and chunk < top[peer]
                    and i == len(chars) - 1
                    and (peer, c) not in origins
                ):
                    out.append((peer, c))
    return out


def text(ops: tuple[CrdtOp, ...]) -> list[object]:
    return [v for name, kind, v in document_values(ops) if name == TEXT]


@dataclass
class Replica:
    conn: int
    state: SharedState
    up: deque[CrdtSync] = field(default_factory=deque)
    down: deque[tuple[CrdtOp, ...]] = field(default_factory=deque)


class CollectMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.server = CrdtStreams(lambda: self.now)
        self.replicas = []
        for i in range(3):
            r = Replica(i + 1, SharedState(10 + i, self._tick))
            self.server.join(r.conn, DOC, 10 + i, AllowAll())
            self.replicas.append(r)
        self.collections = 0
        self.journal: list[tuple[CrdtOp, ...]] = []
        """Every batch the server committed, in order: what a restart replays."""

    def _tick(self) -> int:
        self.now += 1
        return self.now

    def _send(self, r: Replica, ops: tuple[CrdtOp, ...]) -> None:
        r.up.append(CrdtSync(ops=ops))

    def _fan_out(self, writer: int, changed: tuple[CrdtOp, ...], ack: tuple[CrdtOp, ...]) -> None:
        for r in self.replicas:
            if r.conn == writer:
                r.down.append(ack)
            elif changed:
                r.down.append(changed)

    @rule(i=st.integers(0, 2), at=st.integers(0, 50), value=st.integers(0, 9))
    def insert(self, i: int, at: int, value: int) -> None:
        r = self.replicas[i]
        n = len(r.state.list_values(LIST))
        ops = r.state.list_insert(LIST, at % (n + 1), value)
        r.state.receive(ops)
        self._send(r, ops)

    @rule(i=st.integers(0, 2), at=st.integers(0, 50))
    def delete(self, i: int, at: int) -> None:
        r = self.replicas[i]
        n = len(r.state.list_values(LIST))
        if n:
            ops = r.state.list_delete(LIST, at % n)
            r.state.receive(ops)
            self._send(r, ops)

    @rule(i=st.integers(0, 2), a=st.integers(0, 50), b=st.integers(0, 50), v=st.integers(0, 9))
    def move_or_set(self, i: int, a: int, b: int, v: int) -> None:
        r = self.replicas[i]
        n = len(r.state.list_values(LIST))
        if n:
            ops = (
                r.state.list_move(LIST, a % n, b % n) if v % 2 else r.state.list_set(LIST, a % n, v)
            )
            r.state.receive(ops)
            self._send(r, ops)

    @rule(
        i=st.integers(0, 2),
        at=st.integers(0, 50),
        word=st.sampled_from(
            ["a", "bc", "déf", "lorem ipsum dolor sit amet, consectetur adipiscing"]
        ),
    )
    def type_text(self, i: int, at: int, word: str) -> None:
        r = self.replicas[i]
        n = len(str(r.state.text_of(TEXT)))
        ops = tuple(r.state.text_insert(TEXT, at % (n + 1), word))
        r.state.receive(ops)
        self._send(r, ops)

    @rule(i=st.integers(0, 2), at=st.integers(0, 50), count=st.integers(1, 3))
    def erase_text(self, i: int, at: int, count: int) -> None:
        r = self.replicas[i]
        n = len(str(r.state.text_of(TEXT)))
        if n:
            ops = tuple(r.state.text_delete(TEXT, at % n, min(count, n - at % n)))
            r.state.receive(ops)
            self._send(r, ops)

    @rule()
    def restart_replays_the_journal(self) -> None:
        fresh = CrdtStreams(lambda: self.now)
        for batch in self.journal:
            fresh.restore(DOC, batch)
        assert fresh.state_of(DOC) == self.server.state_of(DOC)

    @rule(i=st.integers(0, 2))
    def report(self, i: int) -> None:
        r = self.replicas[i]
        r.up.append(CrdtSync(frontier=r.state.replica.frontier()))

    @rule(i=st.integers(0, 2))
    def server_takes(self, i: int) -> None:
        r = self.replicas[i]
        if not r.up:
            return
        sync = r.up.popleft()
        checked = self.server.check(r.conn, sync)  # a connected writer is never refused
        if sync.frontier:
            self.server.report(r.conn, sync.frontier)
        if checked.ops:
            self.journal.append(checked.ops)
            accepted = self.server.commit(checked)
            self._fan_out(r.conn, accepted.fanout, accepted.ack)

    @rule(i=st.integers(0, 2), many=st.integers(1, 4))
    def deliver(self, i: int, many: int) -> None:
        r = self.replicas[i]
        for _ in range(min(many, len(r.down))):
            r.state.receive(r.down.popleft())

    @rule()
    def server_collects(self) -> None:
        before = visible(self.server.state_of(DOC)), text(self.server.state_of(DOC))
        ops = tuple(self.server.collect(DOC))
        if not ops:
            return
        self.journal.append(ops)
        accepted = self.server.commit(Checked(0, DOC, ops))
        self.collections += 1
        after = visible(self.server.state_of(DOC)), text(self.server.state_of(DOC))
        assert after == before  # collection changes nothing anyone sees
        self._fan_out(0, accepted.fanout, ())

    @invariant()
    def replicas_show_what_they_hold(self) -> None:
        for r in self.replicas:  # what a replica shows is the fold of the entries it holds
            assert visible(r.state.replica.ops()) == r.state.list_values(LIST)

    def teardown(self) -> None:
        for _ in range(3):  # settle: every frame through, every replica reports, collect
            for r in self.replicas:
                while r.up:
                    self.server_takes(r.conn - 1)
            for r in self.replicas:
                self.deliver(r.conn - 1, len(r.down) or 1)
                self.report(r.conn - 1)
            for r in self.replicas:
                while r.up:
                    self.server_takes(r.conn - 1)
            self.server_collects()
            for r in self.replicas:
                self.deliver(r.conn - 1, len(r.down) or 1)
        held = self.server.state_of(DOC)
        want = visible(held)
        for r in self.replicas:
            assert visible(r.state.replica.ops()) == want
            assert text(r.state.replica.ops()) == text(held)
            assert str(r.state.text_of(TEXT)) == str(self.replicas[0].state.text_of(TEXT))
            assert tombstones(r.state.replica.ops()) == 0
            assert r.state.text_of(TEXT).crdt.tombstones() == text_tombstones(held)
        assert tombstones(held) == 0
        assert unjustified(held) == []  # every text tombstone the rule lets go went
        joiner = SharedState(50, lambda: 0)  # one entry a frame, in key order
        for op in sorted(held, key=lambda o: o.key or ""):
            joiner.receive((op,))
        assert str(joiner.text_of(TEXT)) == str(self.replicas[0].state.text_of(TEXT))
        self.restart_replays_the_journal()


TestCollect = CollectMachine.TestCase
TestCollect.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)


# --- a writer away past the bound ----------------------------------------------------------


def _stamp(wall: int, peer: int) -> WireStamp:
    return WireStamp(wall_time=wall, logical=0, peer=peer)


def test_a_writer_away_past_the_bound_is_refused_and_retakes() -> None:
    now = [1_000]

    def tick() -> int:
        now[0] += 1
        return now[0]

    server = CrdtStreams(lambda: now[0], away_ms=10_000)
    ann, bob = SharedState(1, tick), SharedState(2, tick)
    server.join(1, DOC, 1, AllowAll())
    server.join(2, DOC, 2, AllowAll())
    ops = ann.list_insert(LIST, 0, "milk") + ann.list_insert(LIST, 1, "eggs")
    ann.receive(ops)
    server.commit(server.check(1, CrdtSync(ops=ops)))
    bob.receive(server.state_of(DOC))
    server.leave(2)  # bob goes away holding milk and eggs
    gone = ann.list_delete(LIST, 0)
    ann.receive(gone)
    server.commit(server.check(1, CrdtSync(ops=gone)))
    server.report(1, ann.replica.frontier())
    assert server.collect(DOC) == []  # bob has not seen the deletion: milk stays
    now[0] += 20_000  # bob is away past the bound: no longer a member
    server.report(1, ann.replica.frontier())
    published = server.collect(DOC)
    assert [op.key for op in published] == [f"{LIST}/gc"]
    server.commit(Checked(0, DOC, tuple(published)))
    assert tombstones(server.state_of(DOC)) == 0
    assert visible(server.state_of(DOC)) == ("eggs",)

    late = bob.list_set(LIST, 0, "oat milk")  # offline: bob never saw milk go
    bob.receive(late)
    server.join(3, DOC, 2, AllowAll())
    with pytest.raises(ElementCollected) as err:
        server.check(3, CrdtSync(ops=late))
    assert err.value.path == "ops[0].key"
    snapshot = server.state_of(DOC)
    bob.receive(snapshot)
    assert bob.list_values(LIST) == ("oat milk", "eggs")  # not yet re-taken
    bob.retake({(op.slot_id, op.key or "") for op in snapshot})
    assert bob.list_values(LIST) == ("eggs",)


def test_only_the_server_writes_the_watermark() -> None:
    server = CrdtStreams(lambda: 5_000)
    server.join(1, DOC, 7, AllowAll())
    forged = CrdtOp(
        slot_id=node_of(LIST),
        stamp=_stamp(4_000, 7),
        state=collect.encode({9: (4_000, 0, 9)}),
        key=f"{LIST}/gc",
    )
    with pytest.raises(Forbidden) as err:
        server.check(1, CrdtSync(ops=(forged,)))
    assert err.value.path == "ops[0].key"


def test_a_peer_that_reported_nothing_holds_collection_back() -> None:
    now = [1_000]
    server = CrdtStreams(lambda: now[0])
    ann = SharedState(1, lambda: now[0])
    server.join(1, DOC, 1, AllowAll())
    server.join(2, DOC, 2, AllowAll())  # bob joined, said nothing yet
    now[0] += 1
    ops = ann.list_insert(LIST, 0, "x")
    ann.receive(ops)
    server.commit(server.check(1, CrdtSync(ops=ops)))
    now[0] += 1
    gone = ann.list_delete(LIST, 0)
    ann.receive(gone)
    server.commit(server.check(1, CrdtSync(ops=gone)))
    server.report(1, ann.replica.frontier())
    assert server.collect(DOC) == []
    server.report(2, ann.replica.frontier())  # now bob has seen it too
    assert len(server.collect(DOC)) == 1


def test_a_report_keeps_only_peers_the_document_has_seen() -> None:
    server = CrdtStreams(lambda: 5_000)
    server.join(1, DOC, 7, AllowAll())
    ops = SharedState(7, lambda: 4_000).list_insert(LIST, 0, "x")
    server.commit(server.check(1, CrdtSync(ops=ops)))
    invented = tuple((peer, _stamp(4_000, peer)) for peer in range(100, 5_100))
    server.report(1, ((7, _stamp(4_000, 7)), *invented))
    report = server.streams[DOC].reports[7].frontier
    assert report is not None
    assert set(report) == {7}


def test_a_batch_in_key_order_drops_what_its_watermark_collects() -> None:
    """A whole document arrives in ``(node, key)`` order, so a list's ``NAME/gc`` entry comes
    before its elements' entries: a replica collects after the batch, not at the entry."""
    now = [1_000]
    server = CrdtStreams(lambda: now[0])
    ann = SharedState(1, lambda: now[0])
    server.join(1, DOC, 1, AllowAll())
    held = []
    for edit in (lambda: ann.list_insert(LIST, 0, "milk"), lambda: ann.list_delete(LIST, 0)):
        now[0] += 1
        ops = edit()
        ann.receive(ops)
        held += server.commit(server.check(1, CrdtSync(ops=ops))).ack
    server.report(1, ann.replica.frontier())
    gc = server.collect(DOC)
    late = SharedState(2, lambda: now[0])
    late.receive(sorted(held + gc, key=lambda op: (op.slot_id, op.key or "")))
    assert [op.key for op in late.replica.ops()] == [f"{LIST}/gc"]
    assert late.list_values(LIST) == ()
