"""Which TopGun maps a node holds and which messages wait for their loads: a model of
connections, messages, loads and the clock, against ``MapGate`` (and the maps a real TopGun
message names)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.cluster.holding import Holdings, HoldTiming, Load, Release
from octosync.cluster.map_interest import Go, MapGate, Refuse, Taken, maps_named
from octosync.errors import DocumentUnavailable, LimitExceeded
from octosync.wire import topgun as tg

MAPS = ["a", "b", "c"]
MAX_PARKED = 3
MAX_MAPS = 2
IDLE = 1.0
Message = tuple[int, tuple[str, ...]]
"""A stand-in message: a number (in the order sent) and the maps it names."""


def _frame(obj: object) -> bytes:
    return msgspec.msgpack.encode(obj)


def test_maps_named_reads_every_kind_of_message_off_the_wire() -> None:
    ts = {"millis": 1, "counter": 0, "nodeId": "n"}
    op = {"mapName": "todos", "key": "k", "record": {"value": 1, "timestamp": ts}}
    batch = tg.decode(
        _frame(
            {
                "type": "OP_BATCH",
                "payload": {
                    "ops": [op, {**op, "mapName": "notes"}, {**op, "mapName": "$topgun/x"}]
                },
            }
        )
    )
    assert maps_named(batch) == ("notes", "todos")
    one = tg.decode(_frame({"type": "CLIENT_OP", "payload": op}))
    assert maps_named(one) == ("todos",)
    query = tg.decode(
        _frame({"type": "QUERY_SUB", "payload": {"queryId": "q", "mapName": "people", "query": {}}})
    )
    assert maps_named(query) == ("people",)
    sync = tg.decode(_frame({"type": "SYNC_INIT", "mapName": "people", "lastSyncTimestamp": 0}))
    assert maps_named(sync) == ("people",)
    search = tg.decode(
        _frame({"type": "SEARCH", "payload": {"requestId": "r", "mapName": "docs", "query": "x"}})
    )
    assert maps_named(search) == ("docs",)
    sql = {"sql": 'SELECT * FROM "board/1" JOIN b ON "board/1".key = b.key', "queryId": "s"}
    assert maps_named(tg.decode(_frame({"type": "SQL_QUERY", "payload": sql}))) == ("b", "board/1")
    bad = {"sql": "SELEC nonsense", "queryId": "s"}  # refused when handled, nothing to load
    assert maps_named(tg.decode(_frame({"type": "SQL_QUERY", "payload": bad}))) == ()
    assert maps_named(tg.decode(_frame({"type": "PING", "timestamp": 1}))) == ()


class GateMachine(RuleBasedStateMachine):
    """The model: which maps are loading or loaded, each connection's maps and the messages it
    has waiting, in order. Every decision of ``MapGate`` is checked against it, and every
    message handed out is checked to name only loaded maps."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        holdings = Holdings(lambda: self.now, HoldTiming(idle=IDLE, load_timeout=1e9))
        self.gate: MapGate[Message] = MapGate(
            holdings, lambda m: m[1], max_parked=MAX_PARKED, max_maps=MAX_MAPS
        )
        self.sent = 0
        self.loading: set[str] = set()
        self.loaded: set[str] = set()
        self.uses: dict[int, set[str]] = {}
        self.queue: dict[int, list[Message]] = {}
        self.handled: dict[int, list[int]] = {}

    def _handle(self, conn: int, message: Message) -> None:
        assert all(n in self.loaded for n in message[1]), "a message went to a partial copy"
        self.handled.setdefault(conn, []).append(message[0])

    @rule(conn=st.integers(1, 3), names=st.lists(st.sampled_from(MAPS), max_size=2, unique=True))
    def send(self, conn: int, names: list[str]) -> None:
        self.sent += 1
        message = (self.sent, tuple(sorted(names)))
        uses = self.uses.get(conn, set())
        waiting = self.queue.get(conn, [])
        goes = not waiting and all(n in self.loaded for n in names)
        if len(uses | set(names)) > MAX_MAPS:
            with pytest.raises(LimitExceeded):
                self.gate.take(conn, message)
            return
        if not goes and len(waiting) >= MAX_PARKED:
            with pytest.raises(DocumentUnavailable):
                self.gate.take(conn, message)
            return
        taken = self.gate.take(conn, message)
        want_loads = [n for n in message[1] if n not in self.loaded | self.loading]
        assert taken.loads == tuple(Load(n) for n in want_loads)
        assert taken.now == goes
        self.loading.update(want_loads)
        self.uses.setdefault(conn, set()).update(names)
        if goes:
            self._handle(conn, message)
        else:
            self.queue.setdefault(conn, []).append(message)

    @rule(name=st.sampled_from(MAPS))
    def load_ends(self, name: str) -> None:
        went = self.gate.loaded(name)
        if name not in self.loading:
            assert went == []
            return
        self.loading.discard(name)
        self.loaded.add(name)
        want: list[Go[Message]] = []
        for conn in sorted(self.queue):
            waiting = self.queue[conn]
            while waiting and all(n in self.loaded for n in waiting[0][1]):
                want.append(Go(conn, waiting.pop(0)))
        assert went == want
        for go in went:
            self._handle(go.conn, go.message)

    @rule(name=st.sampled_from(MAPS))
    def load_fails(self, name: str) -> None:
        releases, refused = self.gate.failed(name)
        if name not in self.loading:
            assert (releases, refused) == ([], [])
            return
        self.loading.discard(name)
        assert releases == [Release(name, failed=True)]
        members = sorted(c for c, uses in self.uses.items() if name in uses)
        assert [r.conn for r in refused] == members  # each of them waits for it
        assert all(isinstance(r, Refuse) and r.error.path for r in refused)
        for conn in members:  # reset: they leave every map and wait no more
            self.uses.pop(conn)
            self.queue.pop(conn, None)

    @rule(conn=st.integers(1, 3))
    def close(self, conn: int) -> None:
        self.gate.closed(conn)
        self.uses.pop(conn, None)
        self.queue.pop(conn, None)

    @rule()
    def time_passes(self) -> None:
        """Past the idle time of every map that has no member left (none loads that long)."""
        self.now += 2 * IDLE
        releases, refused = self.gate.due()
        used = set().union(*self.uses.values())
        idle = sorted(n for n in self.loaded if n not in used)
        assert releases == [Release(n) for n in idle]
        assert refused == []
        self.loaded.difference_update(idle)

    @invariant()
    def agrees(self) -> None:
        h = self.gate.holdings
        assert h.loading() == sorted(self.loading)
        assert h.held() == sorted(self.loaded)
        for name in MAPS:
            members = {c for c, uses in self.uses.items() if name in uses}
            if name in self.loading or name in self.loaded:
                assert h.members(name) == members
            else:
                assert not members  # a member keeps its map held
        for conn in (1, 2, 3):
            assert self.gate.uses(conn) == self.uses.get(conn, set())
            assert self.gate.parked(conn) == len(self.queue.get(conn, [])) <= MAX_PARKED
            handled = self.handled.get(conn, [])
            assert handled == sorted(handled), "a connection's messages went out of order"


TestGate = GateMachine.TestCase


def test_a_write_waits_for_its_map_and_a_later_read_waits_behind_it() -> None:
    gate: MapGate[Message] = MapGate(Holdings(lambda: 0.0), lambda m: m[1])
    first = gate.take(7, (1, ("b",)))
    assert first == Taken((Load("b"),), now=False)
    assert gate.loaded("b") == [Go(7, (1, ("b",)))]
    assert gate.take(7, (2, ("b",))).now  # held now: no wait
    write = gate.take(7, (3, ("a",)))
    assert write == Taken((Load("a"),), now=False)
    other = gate.take(8, (9, ("a",)))
    assert other == Taken((), now=False)  # the load started once
    assert not gate.take(7, (4, ("b",))).now  # b is loaded, but its turn is after the write
    assert gate.loaded("a") == [Go(7, (3, ("a",))), Go(7, (4, ("b",))), Go(8, (9, ("a",)))]
