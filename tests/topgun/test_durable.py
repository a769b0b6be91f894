"""Fencing tokens and PN counters across restarts: what the core journals is what a restarted
core grants after and counts from (a state machine with crashes that lose uncommitted records),
and the reserved maps stay out of every client's reach."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.crdt.op import OpRecord
from octosync.crdt.sync_messages import SyncInit
from octosync.errors import Forbidden
from octosync.server.topgun_wire import encode
from octosync.store.records import KIND_OP, EncodedRecord, decode_record
from octosync.topgun import Effects, TopGunCore, durable
from octosync.topgun.core import Outbound
from octosync.wire import topgun as tg
from tests.topgun.helpers import ALL, Clock, batch, core, put, sent

CONNS = st.integers(1, 3)
LOCKS = st.sampled_from(["a", "b"])
COUNTERS = st.sampled_from(["likes", "views"])
NODES = st.sampled_from(["n1", "n2"])


def replay(records: list[EncodedRecord], clock: Clock) -> TopGunCore:
    c = core(clock=clock)
    decoded = [decode_record(KIND_OP, e.body, seq=i + 1) for i, e in enumerate(records)]
    assert all(isinstance(r, OpRecord) for r in decoded)
    c.load(r for r in decoded if isinstance(r, OpRecord))
    for conn in (1, 2, 3):
        c.connect(conn, ALL)
    return c


def merged(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Per node the larger tally; a node that never counted above zero has no entry."""
    out = {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}
    return {k: v for k, v in out.items() if v}


class RestartMachine(RuleBasedStateMachine):
    """A journal that commits when told to, and crashes that lose what it had not committed."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock(1_000)
        self.journal: list[EncodedRecord] = []
        self.pending: list[tuple[list[EncodedRecord], list[Outbound]]] = []
        self.core = replay([], self.clock)
        self.top_token = 0
        self.holds: dict[str, tuple[int, int]] = {}
        self.clients: dict[tuple[str, str], tuple[int, int]] = {}
        """Each (counter, node)'s own tallies, as a client keeps them."""
        self.acked: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        """Per counter, the merge of every state whose record was committed."""
        self.sent_states: list[tuple[list[EncodedRecord], str, dict[str, int], dict[str, int]]]
        self.sent_states = []

    def _effects(self, fx: Effects) -> None:
        for ob in fx.out:
            assert not isinstance(
                tg.decode(encode(ob.message)), tg.LockGranted
            )  # never before the commit
        self.pending.append((fx.records, fx.durable))

    @rule(conn=CONNS, name=LOCKS)
    def request(self, conn: int, name: str) -> None:
        rid = f"r{self.clock.now}-{conn}"
        self.clock.now += 1
        self._effects(self.core.handle(conn, tg.LockRequest(tg.LockRequestPayload(rid, name))))

    @rule(name=LOCKS)
    def release(self, name: str) -> None:
        held = self.holds.pop(name, None)
        if held is not None:
            conn, token = held
            msg = tg.LockRelease(tg.LockReleasePayload(name, token, "rel"))
            self._effects(self.core.handle(conn, msg))

    @rule(conn=CONNS)
    def disconnect(self, conn: int) -> None:
        self.holds = {n: h for n, h in self.holds.items() if h[0] != conn}
        self._effects(self.core.disconnect(conn))
        self.core.connect(conn, ALL)

    @rule(name=COUNTERS, node=NODES, up=st.integers(0, 5), down=st.integers(0, 5))
    def count(self, name: str, node: str, up: int, down: int) -> None:
        p, n = self.clients.get((name, node), (0, 0))
        p, n = p + up, n + down
        self.clients[(name, node)] = (p, n)
        state = tg.CounterState.of({node: p}, {node: n})
        fx = self.core.handle(1, tg.CounterSync(tg.CounterStatePayload(name, state)))
        self.sent_states.append((fx.records, name, {node: p}, {node: n}))
        self._effects(fx)

    @precondition(lambda self: self.pending)
    @rule()
    def commit(self) -> None:
        for records, durable_out in self.pending:
            self.journal.extend(records)
            for ob in durable_out:
                msg = tg.decode(encode(ob.message))
                assert isinstance(msg, tg.LockGranted)
                token = int(msg.payload.fencing_token)
                assert token > self.top_token  # across restarts too
                self.top_token = token
                self.holds[str(msg.payload.name)] = (ob.targets[0], token)
        committed = {id(records) for records, _ in self.pending}
        for records, name, p, n in self.sent_states:
            if id(records) in committed and records:
                old_p, old_n = self.acked.get(name, ({}, {}))
                self.acked[name] = (merged(old_p, p), merged(old_n, n))
        self.sent_states = [s for s in self.sent_states if id(s[0]) not in committed]
        self.pending = []

    @rule()
    def crash_and_restart(self) -> None:
        self.pending, self.sent_states, self.holds = [], [], {}
        self.clients = {}
        self.clock.now += 1
        self.core = replay(self.journal, self.clock)
        for name, (p, n) in self.acked.items():
            fx = self.core.handle(2, tg.CounterRequest(tg.CounterName(name)))
            (reply,) = sent(fx, 2)
            assert isinstance(reply, tg.CounterResponse)
            assert reply.payload.state.sides() == (p, n)
            for node in p.keys() | n.keys():  # the client reconnects and reads its tallies back
                self.clients[(name, node)] = (p.get(node, 0), n.get(node, 0))

    @invariant()
    def reserved_maps_stay_out_of_the_maps(self) -> None:
        assert not any(durable.is_reserved(m) for m in self.core.maps.store.maps())


TestRestarts = RestartMachine.TestCase
TestRestarts.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_client_can_neither_write_nor_read_a_reserved_map() -> None:
    c = core()
    c.connect(1, ALL)
    fx = c.handle(1, batch(put("1", "fencing-token", 99, 5_000, map_name=durable.LOCKS_MAP)))
    (rejected, _ack) = sent(fx, 1)
    assert isinstance(rejected, tg.OpRejected)
    assert fx.records == []
    assert c.maps.store.maps() == []
    with pytest.raises(Forbidden):
        c.handle(1, SyncInit(map_name=durable.COUNTERS_MAP))
    query = tg.QuerySub(tg.QuerySubPayload("q", durable.COUNTERS_MAP))
    (refused,) = sent(c.handle(1, query), 1)  # a query is refused in its own response
    assert isinstance(refused, tg.QueryResp)
    assert refused.payload.query_id == "q"
    assert refused.payload.results == []
    assert refused.payload.code == "FORBIDDEN"


def test_a_counter_sync_that_changes_nothing_journals_nothing() -> None:
    c = core()
    c.connect(1, ALL)
    state = tg.CounterStatePayload("likes", tg.CounterState.of({"n1": 3}, {}))
    assert len(c.handle(1, tg.CounterSync(state)).records) == 1
    again = c.handle(1, tg.CounterSync(state))
    assert again.records == []
    (update,) = sent(again, 1)
    assert isinstance(update, tg.CounterUpdate)
    assert msgspec.structs.asdict(update.payload.state)["positive"] == {"n1": 3}


def test_without_a_journal_grants_go_out_at_once_and_nothing_is_journaled() -> None:
    c = core(persistent=False)
    c.connect(1, ALL)
    fx = c.handle(1, tg.LockRequest(tg.LockRequestPayload("r1", "res")))
    (granted,) = sent(fx, 1)
    assert isinstance(granted, tg.LockGranted)
    assert fx.records == []
    assert fx.durable == []
