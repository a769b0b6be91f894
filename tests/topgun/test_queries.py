"""Live queries: predicates as the notes define them, and incremental updates that always
equal a fresh evaluation (a state machine over writes and subscriptions)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from octosync.errors import DecodeError, LimitExceeded
from octosync.topgun.queries import Query, QuerySpec, QueryTable, matches, parse_spec
from octosync.wire import topgun as tg
from tests.topgun.helpers import ALL, batch, core, put, sent

ALICE = {"name": "Alice", "age": 30, "address": {"city": "Oslo"}, "tags": None}


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ({"op": "eq", "attribute": "age", "value": 30}, True),
        ({"op": "neq", "attribute": "age", "value": 30}, False),
        ({"op": "gt", "attribute": "age", "value": 29}, True),
        ({"op": "gte", "attribute": "age", "value": 31}, False),
        ({"op": "lt", "attribute": "age", "value": 31}, True),
        ({"op": "lte", "attribute": "age", "value": 29}, False),
        ({"op": "gt", "attribute": "name", "value": 3}, False),  # no order across types
        ({"op": "gte", "attribute": "tags", "value": 0}, False),  # null fails comparisons
        ({"op": "lt", "attribute": "missing", "value": 1}, False),
        ({"op": "like", "attribute": "name", "value": "al%"}, True),
        ({"op": "like", "attribute": "name", "value": "A_ice"}, True),
        ({"op": "like", "attribute": "name", "value": "Al.ce"}, False),  # '.' is literal
        ({"op": "regex", "attribute": "name", "value": "^A.i"}, True),
        ({"op": "regex", "attribute": "name", "value": "("}, False),  # bad pattern: no match
        ({"op": "in", "attribute": "age", "value": [1, 30]}, True),
        ({"op": "in", "attribute": "age", "value": 30}, False),
        ({"op": "between", "attribute": "age", "value": [30, 40]}, True),
        ({"op": "between", "attribute": "age", "value": [31, 40]}, False),
        ({"op": "isNull", "attribute": "tags"}, True),
        ({"op": "isNull", "attribute": "missing"}, True),
        ({"op": "isNotNull", "attribute": "age"}, True),
        ({"op": "eq", "attribute": "address.city", "value": "Oslo"}, True),
        ({"op": "contains", "attribute": "name", "value": "LIC"}, True),
        (
            {
                "op": "and",
                "children": [
                    {"op": "gte", "attribute": "age", "value": 18},
                    {"op": "not", "children": [{"op": "eq", "attribute": "name", "value": "Bob"}]},
                ],
            },
            True,
        ),
        (
            {
                "op": "or",
                "children": [
                    {"op": "lt", "attribute": "age", "value": 18},
                    {"op": "eq", "attribute": "name", "value": "Bob"},
                ],
            },
            False,
        ),
    ],
)
def test_predicates(predicate: dict[str, Any], expected: bool) -> None:
    assert matches(predicate, ALICE) is expected


def test_a_bad_query_is_refused_with_its_path() -> None:
    bad = msgspec.msgpack.encode({"predicate": {"op": "and", "children": [{"op": "nope"}]}})
    with pytest.raises(DecodeError) as err:
        parse_spec(bad)
    assert err.value.path == "payload.query.predicate.children[0].op"


AGES = st.one_of(st.none(), st.integers(0, 60))
PREDICATES = st.sampled_from(
    [
        None,
        {"op": "gte", "attribute": "age", "value": 18},
        {"op": "between", "attribute": "age", "value": [10, 40]},
        {
            "op": "or",
            "children": [
                {"op": "lt", "attribute": "age", "value": 5},
                {"op": "isNull", "attribute": "age"},
            ],
        },
    ]
)


class LiveQueryMachine(RuleBasedStateMachine):
    """A client's view of each live query, kept by QUERY_RESP / QUERY_UPDATE only, always
    equals what a fresh subscription returns."""

    @initialize()
    def start(self) -> None:
        self.core = core()
        self.core.connect(1, ALL)  # writer
        self.core.connect(2, ALL)  # subscriber
        self.core.connect(3, ALL)  # asks fresh questions
        self.views: dict[str, dict[str, Any]] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self.millis = 10

    def _subscribe(self, conn: int, query_id: str, spec: dict[str, Any]) -> list[tuple[str, Any]]:
        raw = msgspec.Raw(msgspec.msgpack.encode(spec))
        fx = self.core.handle(conn, tg.QuerySub(tg.QuerySubPayload(query_id, "users", raw)))
        (resp,) = sent(fx, conn)
        assert isinstance(resp, tg.QueryResp)
        return [(r.key, msgspec.msgpack.decode(r.value)) for r in resp.payload.results]

    @rule(predicate=PREDICATES, limit=st.one_of(st.none(), st.integers(1, 3)), desc=st.booleans())
    def subscribe(self, predicate: dict[str, Any] | None, limit: int | None, desc: bool) -> None:
        spec: dict[str, Any] = {"sort": [{"field": "age", "direction": "desc" if desc else "asc"}]}
        if predicate is not None:
            spec["predicate"] = predicate
        if limit is not None:
            spec["limit"] = limit
        query_id = f"q{len(self.specs)}"
        self.specs[query_id] = spec
        self.views[query_id] = dict(self._subscribe(2, query_id, spec))

    @rule(key=st.sampled_from("abcde"), age=AGES, remove=st.booleans())
    def write(self, key: str, age: int | None, remove: bool) -> None:
        self.millis += 1
        value = None if remove else {"age": age}
        fx = self.core.handle(1, batch(put(str(self.millis), key, value, self.millis)))
        self._updates(fx)

    def _updates(self, fx: Any) -> None:
        for msg in sent(fx, 2):
            assert isinstance(msg, tg.QueryUpdate)
            p = msg.payload
            view = self.views[p.query_id]
            if p.change_type == "LEAVE":
                assert p.key in view
                del view[p.key]
            else:
                assert (p.key in view) == (p.change_type == "UPDATE")
                view[p.key] = msgspec.msgpack.decode(p.value)

    @invariant()
    def views_equal_fresh_results(self) -> None:
        for _ in range(1_000):  # what a budget left waiting goes out with the next flushes
            if not self.core.queries.pending():
                break
            self._updates(self.core.flush())
        for query_id, spec in self.specs.items():
            fresh = dict(self._subscribe(3, "probe", spec))
            self.core.handle(3, tg.QueryUnsub(tg.QueryId("probe")))
            assert self.views[query_id] == fresh


TestLiveQueries = LiveQueryMachine.TestCase


class StarvedLiveQueryMachine(LiveQueryMachine):
    """The same, with a budget of one row per write or flush: updates trickle out over many
    flushes, coalesced, and still end equal to a fresh answer."""

    @initialize()
    def start(self) -> None:
        super().start()
        self.core.query_budget = 1

    @rule()
    def flush_once(self) -> None:
        self._updates(self.core.flush())

    @rule()
    def drain(self) -> None:
        super().views_equal_fresh_results()

    @invariant()
    def views_equal_fresh_results(self) -> None:
        """Only once nothing waits: writes pile up between flushes and are coalesced."""
        if not self.core.queries.pending():
            super().views_equal_fresh_results()


TestStarvedLiveQueries = StarvedLiveQueryMachine.TestCase


def test_like_and_regex_run_in_linear_time_and_refuse_what_would_not() -> None:
    """RE2 semantics: the patterns that make a backtracking engine take exponential time
    match here like any other; patterns that need backtracking are refused by name."""
    value = {"s": "a" * 60}
    assert not matches({"op": "like", "attribute": "s", "value": "%a%a%a%a%a%a%a%a%b"}, value)
    assert matches({"op": "like", "attribute": "s", "value": "%A%a_"}, value)
    assert not matches({"op": "regex", "attribute": "s", "value": "^(a+)+$b"}, value)
    assert matches({"op": "regex", "attribute": "s", "value": "^(a+)+$"}, value)
    backreference = {"predicate": {"op": "regex", "attribute": "s", "value": r"(a)\1"}}
    with pytest.raises(DecodeError, match="RE2") as err:
        parse_spec(msgspec.msgpack.encode(backreference))
    assert err.value.path == "payload.query.predicate.value"
    long = {"predicate": {"op": "like", "attribute": "s", "value": "%" * 1025}}
    with pytest.raises(DecodeError, match="at most 1024"):
        parse_spec(msgspec.msgpack.encode(long))


def test_live_queries_are_capped_per_connection_and_per_map_and_names_are_forgotten() -> None:
    table = QueryTable(per_connection=2, per_map=3)
    spec = QuerySpec()
    table.subscribe(Query(1, "a", "m1", spec), {})
    table.subscribe(Query(1, "b", "m2", spec), {})
    with pytest.raises(LimitExceeded, match="2 live queries"):
        table.subscribe(Query(1, "c", "m3", spec), {})
    table.subscribe(Query(1, "a", "m3", spec), {})  # the same id replaces, within the cap
    assert table.watched() == {"m2", "m3"}
    for conn in (2, 3):
        table.subscribe(Query(conn, "x", "m3", spec), {})
    with pytest.raises(LimitExceeded, match="3 live queries"):
        table.subscribe(Query(4, "x", "m3", spec), {})
    table.unsubscribe(1, "b")
    table.disconnect(1)
    table.disconnect(2)
    table.unsubscribe(3, "x")
    assert table.watched() == set()


def test_a_map_name_past_the_limit_is_refused_before_anything_keeps_it() -> None:
    c = core()
    c.connect(1, ALL)
    raw = msgspec.Raw(msgspec.msgpack.encode({}))
    fx = c.handle(1, tg.QuerySub(tg.QuerySubPayload("q", "m" * 257, raw)))
    (refused,) = sent(fx, 1)  # answered in its own response, with the error inside
    assert isinstance(refused, tg.QueryResp), refused
    assert refused.payload.code == "LIMIT_EXCEEDED", refused
    assert "map name" in (refused.payload.error or "")
    assert c.queries.watched() == set()
    fx = c.handle(1, batch(put("1", "k", 1, 10, map_name="n" * 257)))
    (rejected, *_) = sent(fx, 1)
    assert isinstance(rejected, tg.OpRejected), rejected
    assert "m" * 257 not in c.queries.watched()
    assert c.maps.live_items("n" * 257) == {}
