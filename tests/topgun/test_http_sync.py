"""TopGun's HTTP sync without sockets: ack and refusals, deltas since a timestamp (bounded,
resumable), queries and searches, and what a token may not read."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from octosync.crdt.sync_messages import NIL, WireTimestamp
from octosync.errors import DecodeError
from octosync.server.auth import ClaimGrants
from octosync.topgun import TopGunCore, http_sync
from octosync.wire import topgun_http as th
from tests.topgun.helpers import ALL, Clock, batch, or_add, or_remove, put, sent

ZERO = WireTimestamp(0, 0, "")


def request(**parts: Any) -> th.HttpSyncRequest:
    return th.HttpSyncRequest("client", WireTimestamp(1, 0, "client"), **parts)


def sync(c: TopGunCore, req: th.HttpSyncRequest, grants: Any = ALL) -> th.HttpSyncResponse:
    c.connect(9, grants)
    replies = []
    ops = http_sync.op_batch(req)
    if ops is not None:
        replies = sent(c.handle(9, ops), 9)
    try:
        return http_sync.answer(c, 9, grants, req, replies)
    finally:
        c.disconnect(9)


def test_ops_are_acked_and_a_refused_one_is_an_error_naming_it() -> None:
    c = TopGunCore(Clock(), persistent=False)
    mixed = ClaimGrants.of("m", maps={"users": frozenset({"read", "write"})})
    ops = [put("1", "u1", 1, 10), put("2", "x", 1, 11, map_name="secret")]
    got = sync(c, request(operations=ops), mixed)
    assert got.ack is not None
    assert got.ack.last_id == "1"  # below the refused op
    assert got.errors is not None
    assert [(e.code, e.context) for e in got.errors] == [(403, "2")]
    assert list(c.maps.live_items("users")) == ["u1"]


def test_deltas_resume_by_arrival_even_for_old_timestamps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = TopGunCore(Clock(), persistent=False)
    c.connect(1, ALL)
    c.handle(1, batch(*(put(str(i), f"k{i}", i, 100 + i) for i in range(1, 8))))
    c.handle(1, batch(put("9", "k3", None, 200)))  # a remove travels as REMOVE
    monkeypatch.setattr(http_sync, "MAX_DELTA_RECORDS", 3)

    def drain(since: WireTimestamp) -> tuple[list[tuple[str, str]], WireTimestamp]:
        seen: list[tuple[str, str]] = []
        for _ in range(10):
            got = sync(c, request(sync_maps=[th.SyncMapEntry("users", since)]))
            (d,) = got.deltas or []
            seen += [(r.key, r.event_type) for r in d.records]
            since = d.server_sync_timestamp
            if len(d.records) < 3:
                return seen, since
        raise AssertionError("deltas never ended")

    seen, since = drain(ZERO)
    assert [k for k, _ in seen] == [f"k{i}" for i in range(1, 8)]  # each once
    assert dict(seen)["k3"] == "REMOVE"
    assert drain(since)[0] == []
    # an offline writer's op arrives late with an old timestamp: it is still delivered
    c.handle(1, batch(put("10", "late", "x", 5), put("11", "k1", "new", 300)))
    later, since = drain(since)
    assert later == [("late", "PUT"), ("k1", "PUT")]
    # a mark from another server process (another boot) starts from the beginning
    other = WireTimestamp(since.millis, since.counter + 1, since.node_id)
    assert len(drain(other)[0]) == 8


def test_a_map_the_token_may_not_read_is_an_error_the_rest_is_answered() -> None:
    c = TopGunCore(Clock(), persistent=False)
    c.connect(1, ALL)
    c.handle(1, batch(put("1", "u1", {"age": 3}, 10)))
    reader = ClaimGrants.of("r", maps={"users": frozenset({"read"})})
    maps = [th.SyncMapEntry("users", ZERO), th.SyncMapEntry("secret", ZERO)]
    got = sync(c, request(sync_maps=maps), reader)
    assert [d.map_name for d in got.deltas or []] == ["users"]
    assert [(e.code, e.context) for e in got.errors or []] == [(403, "secret")]


def test_queries_by_where_filter_and_their_refusals() -> None:
    c = TopGunCore(Clock(), persistent=False)
    c.connect(1, ALL)
    c.handle(1, batch(put("1", "a", {"team": "red"}, 10), put("2", "b", {"team": "blue"}, 11)))
    where = msgspec.Raw(msgspec.msgpack.encode({"team": "red"}))
    bad = msgspec.Raw(msgspec.msgpack.encode({"predicate": {"op": "nope"}}))
    got = sync(
        c,
        request(
            queries=[
                th.HttpQueryRequest("q1", "users", where),
                th.HttpQueryRequest("q2", "users", bad),
                th.HttpQueryRequest("q3", "users", NIL, limit=1),
            ]
        ),
    )
    results = {q.query_id: [r.key for r in q.results] for q in got.query_results or []}
    assert results == {"q1": ["a"], "q3": ["a"]}
    assert [e.context for e in got.errors or []] == ["q2"]
    assert not c.queries.watched()  # nothing stays subscribed


def test_a_decoded_request_is_strict() -> None:
    body = msgspec.msgpack.encode(
        {"clientId": "c", "clientHlc": {"millis": 1, "counter": 0, "nodeId": "n"}, "extra": 1}
    )
    with pytest.raises(DecodeError, match="extra"):
        th.decode_request(body)


@pytest.mark.parametrize(
    ("hlc", "path"),
    [
        ({"millis": 1.5, "counter": 0, "nodeId": "n"}, "clientHlc.millis"),
        ({"millis": 1, "counter": 2**31, "nodeId": "n"}, "clientHlc.counter"),
        ({"millis": True, "counter": 0, "nodeId": "n"}, "clientHlc.millis"),
    ],
)
def test_a_bad_number_in_a_request_is_refused_naming_its_field(
    hlc: dict[str, object], path: str
) -> None:
    with pytest.raises(DecodeError) as info:
        th.decode_request(msgspec.msgpack.encode({"clientId": "c", "clientHlc": hlc}))
    assert info.value.path == path


def test_a_body_that_is_not_msgpack_is_refused_as_the_body() -> None:
    with pytest.raises(DecodeError) as info:
        th.decode_request(b"\xc1")
    assert info.value.path == "body"


def test_or_map_ops_are_applied_and_acked_and_their_keys_stay_out_of_lww_deltas() -> None:
    """TopGun's HttpSyncProvider turns each delta record into a ``SERVER_EVENT`` with an LWW
    ``record`` only, so OR-map changes reach HTTP clients as nothing rather than as a wrong
    LWW value; their ops are taken like the WebSocket's."""
    c = TopGunCore(Clock(), persistent=False)
    add = or_add("1", "post", "red", 100)
    got = sync(c, request(operations=[add]))
    assert got.ack is not None
    assert got.ack.last_id == "1"
    assert got.errors is None
    assert [v for _, v in c.maps.store.or_values("tags", "post")] == [msgspec.msgpack.encode("red")]
    tag = "100:0:n1"
    gone = sync(c, request(operations=[or_remove("2", "post", tag, 101)]))
    assert gone.ack is not None
    assert gone.ack.last_id == "2"
    assert c.maps.store.or_values("tags", "post") == []
    deltas = sync(c, request(sync_maps=[th.SyncMapEntry("tags", ZERO)]))
    assert [d.records for d in deltas.deltas or []] == [[]]
