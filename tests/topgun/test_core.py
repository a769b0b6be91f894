"""TopGun face rules without sockets: writes, acks, fan-out, sync, GC, topics, ping."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import HLC, LWWMap, SyncRequester
from octosync.crdt.op import OpKind
from octosync.crdt.sync_messages import SyncInit
from octosync.errors import DecodeError, Forbidden
from octosync.server.auth import ClaimGrants
from octosync.server.topgun_wire import encode
from octosync.store.records import decode_record
from octosync.topgun import TopGunCore
from octosync.wire import topgun as tg
from octosync.wire.topgun_services import GcPrune
from tests.topgun.helpers import (
    ALL,
    Clock,
    after_commit,
    batch,
    core,
    or_add,
    or_remove,
    put,
    sent,
)

READER = ClaimGrants.of("reader", maps={"users": frozenset({"read"})})


def opened(c: TopGunCore, conn: int, grants: ClaimGrants = ALL, maps: tuple[str, ...] = ()) -> None:
    c.connect(conn, grants)
    for name in maps:
        c.handle(conn, SyncInit(name, 0))


def test_write_is_acked_and_fanned_out_to_other_connections_with_the_map_open() -> None:
    c = core()
    opened(c, 1)
    opened(c, 2, maps=("users",))
    opened(c, 3, maps=("other",))
    fx = c.handle(1, batch(put("1", "u1", {"name": "Alice"}, 10), put("2", "u2", "Bob", 11)))
    (ack,) = sent(fx, 1)
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.last_id == "2"
    assert ack.payload.achieved_level == "MEMORY"
    assert ack.payload.results is None  # nothing was asked explicitly
    assert sent(fx, 2) == []  # events wait for the flush at the end of the loop's turn
    (event,) = sent(c.flush(), 2)
    assert isinstance(event, tg.ServerBatchEvent)
    assert [(e.key, e.event_type) for e in event.payload.events] == [("u1", "PUT"), ("u2", "PUT")]
    assert c.flush().out == []
    assert len(fx.records) == 2
    assert fx.durable == []


def test_a_remove_event_carries_a_record_with_a_null_value() -> None:
    c = core()
    opened(c, 1)
    opened(c, 2, maps=("users",))
    c.handle(1, batch(put("1", "u1", "x", 10)))
    c.flush()
    c.handle(1, batch(put("2", "u1", None, 11)))
    (event,) = sent(c.flush(), 2)
    assert isinstance(event, tg.ServerEvent)
    assert event.payload.event_type == "REMOVE"
    assert event.payload.record is not None
    assert bytes(event.payload.record.value) == b"\xc0"
    assert c.maps.live_items("users") == {}


def test_resent_ops_change_nothing_and_are_acked_again() -> None:
    c = core()
    opened(c, 1)
    opened(c, 2, maps=("users",))
    first = c.handle(1, batch(put("1", "u1", 1, 10)))
    c.flush()
    again = c.handle(1, batch(put("1", "u1", 1, 10), put("2", "u2", 2, 12)))
    assert len(first.records) == 1
    assert [decode_record(r.kind, r.body, seq=0).key for r in again.records] == ["u2"]  # type: ignore[union-attr]
    (event,) = sent(c.flush(), 2)
    assert isinstance(event, tg.ServerEvent)
    assert event.payload.key == "u2"
    (ack,) = sent(again, 1)
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.last_id == "2"


def test_a_write_without_the_grant_is_rejected_and_not_applied() -> None:
    c = core()
    opened(c, 1, READER)
    opened(c, 2, maps=("users",))
    fx = c.handle(1, batch(put("7", "u1", 1, 10)))
    rejected, ack = sent(fx, 1)
    assert isinstance(rejected, tg.OpRejected)
    assert rejected.payload.op_id == "7"
    assert "write" in rejected.payload.reason
    assert rejected.payload.code == 403
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.last_id == "0"  # covers nothing: the refused op stays pending
    assert ack.payload.results == []
    assert sent(fx, 2) == []
    assert fx.records == []
    assert c.maps.live_items("users") == {}


MIXED = ClaimGrants.of("mixed", maps={"users": frozenset({"read", "write"})})


def test_a_refused_op_is_never_covered_by_the_ack_of_its_batch() -> None:
    """The real client marks every op with ``id <= lastId``, and every op listed in
    ``results``, synced; a refused op must be neither, the accepted ones must be one."""
    c = core()
    opened(c, 1, MIXED)
    ops = [
        put("3", "u1", 1, 10),
        put("4", "x", 1, 11, map_name="secret"),
        put("5", "u2", 2, 12),
        put("6", "y", 1, 13, map_name="secret"),
        put("7", "u3", 3, 14),
    ]
    fx = c.handle(1, batch(*ops))
    *rejected, ack = sent(fx, 1)
    assert [m.payload.op_id for m in rejected if isinstance(m, tg.OpRejected)] == ["4", "6"]
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.last_id == "3"
    listed = [(r.op_id, r.success) for r in ack.payload.results or []]
    assert listed == [("3", True), ("5", True), ("7", True)]
    assert sorted(c.maps.live_items("users")) == ["u1", "u2", "u3"]


@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=60), st.booleans()),
        min_size=1,
        max_size=12,
        unique_by=lambda t: t[0],
    )
)
@settings(max_examples=150, deadline=None)
def test_whatever_the_order_no_refused_op_is_marked_synced(ops: list[tuple[int, bool]]) -> None:
    """The client's own rule applied to the ack: synced = listed in results, or numeric id
    at most lastId. Refused ops never are; accepted ops always are. (The client sends its
    pending ops in id order.)"""
    ops = sorted(ops)
    c = core()
    opened(c, 1, MIXED)
    client_ops = [
        put(str(n), f"k{n}", n, 10 + n, map_name="secret" if refused else "users")
        for n, refused in ops
    ]
    for level in (None, "FIRE_AND_FORGET", "APPLIED"):
        fx = c.handle(1, batch(*client_ops, write_concern=level))
        (ack,) = [m for m in sent(fx, 1) if isinstance(m, tg.OpAck)]
        listed = {r.op_id for r in ack.payload.results or []}
        last = int(ack.payload.last_id)
        synced = {str(n) for n, _ in ops if n <= last} | listed
        assert synced == {str(n) for n, refused in ops if not refused}


def test_persisted_is_acked_after_the_commit_with_results_per_op() -> None:
    c = core()
    opened(c, 1)
    fx = c.handle(1, batch(put("1", "u1", 1, 10), put("2", "u2", 2, 11), write_concern="PERSISTED"))
    assert sent(fx, 1) == []
    (durable,) = fx.durable
    ack = tg.decode(encode(durable.message))
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.achieved_level == "PERSISTED"
    assert [(r.op_id, r.success) for r in ack.payload.results or []] == [("1", True), ("2", True)]
    assert len(fx.records) == 2


def test_persisted_without_a_journal_says_what_was_achieved() -> None:
    c = core(persistent=False)
    opened(c, 1)
    fx = c.handle(1, batch(put("1", "u1", 1, 10, write_concern="PERSISTED")))
    (ack,) = sent(fx, 1)
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.achieved_level == "APPLIED"
    (result,) = ack.payload.results or []
    assert result.success is False
    assert result.error is not None
    assert fx.durable == []


def test_fire_and_forget_is_acked_before_anything_else() -> None:
    c = core()
    opened(c, 1, READER)
    fx = c.handle(1, batch(put("1", "u1", 1, 10), write_concern="FIRE_AND_FORGET"))
    ack, rejected = sent(fx, 1)
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.achieved_level == "FIRE_AND_FORGET"
    assert ack.payload.last_id == "0"  # not the refused op's id
    assert isinstance(rejected, tg.OpRejected)


def test_an_unknown_write_concern_is_refused_whole() -> None:
    c = core()
    opened(c, 1)
    # every op of the batch is rejected (its write-concern promise resolves), none acked
    fx = c.handle(1, batch(put("1", "u1", 1, 10), write_concern="SOMETIMES"))
    (rejected,) = sent(fx, 1)
    assert isinstance(rejected, tg.OpRejected)
    assert rejected.payload.op_id == "1"
    assert rejected.payload.reason.startswith("DecodeError: unknown write concern 'SOMETIMES'")
    one = put("2", "u1", 1, 10, write_concern="NOW")
    fx = c.handle(1, batch(put("1", "u0", 1, 10), one))
    assert [m.payload.op_id for m in sent(fx, 1) if isinstance(m, tg.OpRejected)] == ["1", "2"]
    assert not any(isinstance(m, tg.OpAck) for m in sent(fx, 1))
    assert fx.records == []
    assert c.maps.live_items("users") == {}


def test_or_adds_and_removes_fan_out_and_fold() -> None:
    c = core()
    opened(c, 1)
    opened(c, 2, maps=("tags",))
    c.handle(1, batch(or_add("1", "p", "rust", 10), or_add("2", "p", "py", 11)))
    c.flush()
    c.handle(1, batch(or_remove("3", "p", "10:0:n1", 12)))
    (event,) = sent(c.flush(), 2)
    assert isinstance(event, tg.ServerEvent)
    assert (event.payload.event_type, event.payload.or_tag) == ("OR_REMOVE", "10:0:n1")
    live = c.maps.store.or_values("tags", "p")
    assert [msgspec.msgpack.decode(v) for _, v in live] == ["py"]


def test_ping_gets_pong_with_the_server_time() -> None:
    clock = Clock(123_456)
    c = core(clock=clock)
    opened(c, 1)
    (pong,) = sent(c.handle(1, tg.Ping(timestamp=42)), 1)
    assert pong == tg.Pong(timestamp=42, server_time=123_456)


def test_sync_needs_the_read_grant() -> None:
    c = core()
    opened(c, 1, ClaimGrants(subject="x"))
    with pytest.raises(Forbidden):
        c.handle(1, SyncInit("users", 0))


def test_gc_prunes_tombstones_and_resets_clients_that_synced_before_the_horizon() -> None:
    c = core()
    opened(c, 1)
    c.handle(1, batch(put("1", "u1", "x", 10), put("2", "u1", None, 20), put("3", "u2", 1, 30)))
    fx = c.gc(25)
    (prune,) = sent(fx, 1)
    assert isinstance(prune, GcPrune)
    assert prune.payload.older_than.millis == 25
    assert c.maps.store.lww_winner("users", "u1") is None
    (reset,) = sent(c.handle(1, SyncInit("users", 5)), 1)
    assert isinstance(reset, tg.SyncResetRequired)
    (root,) = sent(c.handle(1, SyncInit("users", 26)), 1)
    assert isinstance(root, tg.SyncRespRoot)


def test_topic_messages_reach_the_other_subscribers_only() -> None:
    c = core()
    for conn in (1, 2, 3):
        opened(c, conn)
    for conn in (1, 2):
        c.handle(conn, tg.TopicSub(tg.Topic("chat/room-1")))
    data = msgspec.Raw(msgspec.msgpack.encode({"text": "hi"}))
    fx = c.handle(1, tg.TopicPub(tg.TopicPubPayload("chat/room-1", data)))
    assert sent(fx, 1) == []
    assert sent(fx, 3) == []
    (msg,) = sent(fx, 2)
    assert isinstance(msg, tg.TopicMessage)
    assert msgspec.msgpack.decode(msg.payload.data) == {"text": "hi"}
    assert msg.payload.publisher_id == "all"
    with pytest.raises(DecodeError):
        c.handle(1, tg.TopicSub(tg.Topic("bad topic!")))
    c.connect(4, ClaimGrants.of("mute", topics={"*": frozenset({"subscribe"})}))
    with pytest.raises(Forbidden):
        c.handle(4, tg.TopicPub(tg.TopicPubPayload("chat/room-1", data)))


# -- properties ---------------------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "d"])
_writes = st.lists(
    st.tuples(
        st.sampled_from(["n1", "n2"]),
        _keys,
        st.one_of(st.none(), st.integers(0, 9)),
        st.integers(1, 30),
    ),
    max_size=25,
)


def _ops(writes: list[tuple[str, str, int | None, int]]) -> list[tg.ClientOp]:
    return [
        put(str(i + 1), key, value, millis, node, counter=i)
        for i, (node, key, value, millis) in enumerate(writes)
    ]


@settings(max_examples=60)
@given(_writes, st.data())
def test_resends_in_any_grouping_give_the_state_of_one_application(
    writes: list[tuple[str, str, int | None, int]], data: st.DataObject
) -> None:
    ops = _ops(writes)
    once = core()
    opened(once, 1)
    for op in ops:
        once.handle(1, batch(op))
    resent = core()
    opened(resent, 1)
    # the client resends every unacknowledged op with each new batch: prefixes of the log
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ops)), max_size=6)))
    for cut in [*cuts, len(ops)]:
        if cut:
            resent.handle(1, batch(*ops[:cut]))
    assert list(resent.maps.store.rows()) == list(once.maps.store.rows())
    expected: dict[str, tuple[tuple[int, int, str], int | None]] = {}
    for op, (node, key, value, millis) in zip(ops, writes, strict=True):
        stamp = (millis, int(op.record.timestamp.counter), node)  # type: ignore[union-attr]
        if key not in expected or stamp > expected[key][0]:
            expected[key] = (stamp, value)
    live = {k: v for k, (_, v) in expected.items() if v is not None}
    got = {k: msgspec.msgpack.decode(v) for k, v in resent.maps.live_items("users").items()}
    assert got == live


@settings(max_examples=40)
@given(_writes)
def test_a_fresh_replica_reaches_the_server_state_by_merkle_sync(
    server_writes: list[tuple[str, str, int | None, int]],
) -> None:
    c = core()
    opened(c, 1)
    if server_writes:
        c.handle(1, batch(*_ops(server_writes)))
    replica = LWWMap(HLC("r", lambda: 0))
    requester = SyncRequester("users", replica, leaf_digests=False)
    wave: list[object] = [requester.start()]
    rounds = 0
    while wave:
        rounds += 1
        replies = []
        for request in wave:
            # through the wire, as the real client sends them
            message = tg.decode(tg.encode(request))  # type: ignore[arg-type]
            replies.extend(sent(c.handle(1, message), 1))
        wave = [nxt for reply in replies for nxt in requester.receive(reply)]  # type: ignore[arg-type]
    assert rounds <= 5
    server = {k: msgspec.msgpack.decode(v) for k, v in c.maps.live_items("users").items()}
    assert replica.items() == server
    assert replica.merkle.root() == c.maps.store.merkle("users").root()


def test_locks_through_the_core_need_the_grant_and_are_released_on_disconnect() -> None:
    c = core()
    opened(c, 1)
    opened(c, 2)
    c.connect(3, ClaimGrants(subject="no-locks"))
    with pytest.raises(Forbidden):
        c.handle(3, tg.LockRequest(tg.LockRequestPayload("r0", "res", 1000)))
    fx = c.handle(1, tg.LockRequest(tg.LockRequestPayload("r1", "res", 1000)))
    assert sent(fx, 1) == []  # a grant waits for its fencing token's commit
    (granted,) = after_commit(fx, 1)
    assert isinstance(granted, tg.LockGranted)
    assert len(fx.records) == 1
    fx = c.handle(2, tg.LockRequest(tg.LockRequestPayload("r2", "res", 1000)))
    assert sent(fx, 2) == after_commit(fx, 2) == []
    wrong = tg.LockRelease(tg.LockReleasePayload("res", granted.payload.fencing_token + 1, "r1"))
    (refused,) = sent(c.handle(1, wrong), 1)
    assert isinstance(refused, tg.LockReleased)
    assert refused.payload.success is False
    (next_grant,) = after_commit(c.disconnect(1), 2)  # the holder went: the waiter gets it
    assert isinstance(next_grant, tg.LockGranted)
    assert next_grant.payload.request_id == "r2"
    assert next_grant.payload.fencing_token > granted.payload.fencing_token


@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 5_000), st.booleans()),
        min_size=1,
        max_size=20,
    ),
    steps=st.lists(st.integers(1, 3_000), min_size=1, max_size=8),
)
@settings(max_examples=80, deadline=None)
def test_the_tick_prunes_tombstones_past_the_age_on_its_schedule(
    writes: list[tuple[str, int, bool]], steps: list[int]
) -> None:
    clock = Clock(5_000)
    age, every = 1_000, 2_000
    c = TopGunCore(clock, persistent=True, gc_age_ms=age, gc_every_ms=every)
    opened(c, 1)
    ops = [put(str(i), k, None if dead else i, ms) for i, (k, ms, dead) in enumerate(writes)]
    c.handle(1, batch(*ops))
    winners = {k: c.maps.store.lww_winner("users", k) for k, _, _ in writes}
    next_gc, horizon = 5_000 + every, 0
    for dt in steps:
        clock.now += dt
        fx = c.tick()
        if clock.now >= next_gc:  # due: one GC_PRUNE to every connection
            next_gc, horizon = clock.now + every, clock.now - age
            (prune,) = sent(fx, 1)
            assert isinstance(prune, GcPrune)
            assert prune.payload.older_than.millis == horizon
        else:
            assert sent(fx, 1) == []
        for key, win in winners.items():
            assert win is not None
            pruned = win.op is OpKind.REMOVE and win.ts.millis < horizon
            assert (c.maps.store.lww_winner("users", key) is None) == pruned
    (reply,) = sent(c.handle(1, SyncInit("users", max(horizon - 1, 1))), 1)
    assert isinstance(reply, tg.SyncResetRequired) == (horizon > 1)


@given(
    opens=st.lists(st.sets(st.sampled_from(["a", "b", "c"])), min_size=1, max_size=5),
    writes=st.lists(
        st.tuples(
            st.integers(0, 4),
            st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)), min_size=1),
        ),
        max_size=6,
    ),
)
@settings(max_examples=100, deadline=None)
def test_one_flush_carries_every_batch_to_each_reader_but_its_writer_in_order(
    opens: list[set[str]], writes: list[tuple[int, list[tuple[str, int]]]]
) -> None:
    c = core()
    for conn, maps in enumerate(opens):
        opened(c, conn, maps=tuple(sorted(maps)))
    millis = 100
    written: list[tuple[int, str, str]] = []
    for writer, ops in writes:
        writer %= len(opens)
        batch_ops = []
        for name, k in ops:
            millis += 1
            batch_ops.append(put(str(millis), f"k{k}", millis, millis, map_name=name))
            written.append((writer, name, f"k{k}"))
        c.handle(writer, batch(*batch_ops))
        opens[writer] |= {name for name, _ in ops}  # writing a map opens it for its writer
    fx = c.flush()  # to every connection with the map open by now, but the writer
    expected = {
        conn: [(name, key) for writer, name, key in written if writer != conn and name in maps]
        for conn, maps in enumerate(opens)
    }
    assert c.flush().out == []  # nothing twice
    for conn in expected:
        got: list[tuple[str, str]] = []
        messages = sent(fx, conn)
        assert len(messages) <= 1  # one message per connection per flush
        for msg in messages:
            events = (
                [msg.payload] if isinstance(msg, tg.ServerEvent) else msg.payload.events  # type: ignore[union-attr]
            )
            got.extend((e.map_name, e.key) for e in events)
        assert got == expected[conn]


def test_events_encoded_once_are_the_messages_byte_for_byte() -> None:
    events = [
        tg.ServerEventPayload("m", "PUT", f"k{i}", record=put(str(i), "k", i, i).record)
        for i in range(3)
    ]
    raws = [msgspec.Raw(tg.encode_event(e)) for e in events]
    batch_bytes = tg.encode(tg.ServerBatchEvent(tg.ServerBatchEventPayload(events)))
    assert tg.encode_events(raws) == batch_bytes
    assert tg.encode_events(raws[:1]) == tg.encode(tg.ServerEvent(events[0]))


@pytest.mark.parametrize("asked", [None, "MEMORY", "APPLIED"])
def test_in_a_cluster_that_holds_acks_every_ack_waits_for_the_cluster(asked: str | None) -> None:
    c = core()
    c.replicated = True
    c.acks_replicated = True
    opened(c, 1)
    fx = c.handle(1, batch(put("1", "u1", 1, 10), put("2", "u2", 2, 11), write_concern=asked))
    assert [m for m in sent(fx, 1) if isinstance(m, tg.OpAck)] == []  # not before it is stored
    (held,) = fx.replicated
    ack = tg.decode(encode(held.message))
    assert isinstance(ack, tg.OpAck)
    assert (ack.payload.last_id, ack.payload.achieved_level) == ("2", "REPLICATED")
    assert len(fx.replicate) == 2


def test_in_a_cluster_acks_come_at_the_level_asked_unless_held() -> None:
    c = core()
    c.replicated = True
    opened(c, 1)
    fx = c.handle(1, batch(put("1", "u1", 1, 10)))
    (ack,) = sent(fx, 1)
    assert isinstance(ack, tg.OpAck)
    assert ack.payload.achieved_level == "MEMORY"
    assert fx.replicated == []
