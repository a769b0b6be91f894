"""What the core does with each client message: a table from message type to its handler.

A handler gets the core, the step's :class:`Effects`, the connection and its state, and the
message; it raises a typed error to refuse the message (nothing changed). Types the table
lacks are the requests this server answers as "not served here" (``topgun.requests``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from octosync.crdt.sync_messages import MerkleReqBucket, SyncInit
from octosync.errors import DecodeError
from octosync.store.records import encode_record
from octosync.topgun import durable, event_journal, replies, sql
from octosync.topgun.access import Conn, require, require_map, topic_name
from octosync.topgun.core_view import CoreView
from octosync.topgun.effects import Effects, Grants, Outbound
from octosync.topgun.hybrid import hybrid_search, vector_search
from octosync.topgun.map_sync import merkle_sync, or_push, or_sync
from octosync.topgun.queries import Query, parse_spec
from octosync.topgun.write_batch import write
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv
from octosync.wire.topgun_requests import QuerySyncInit
from octosync.wire.topgun_services import OrMapSyncInit

Handler = Callable[[CoreView, Effects, int, Conn, Any], None]

MAX_COUNTER_NAME = 4096
"""The journal's key bound (``crdt.op.Key``): a counter's state is journaled under its name."""


# -- maps -------------------------------------------------------------------------------------


def _op_batch(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.OpBatch) -> None:
    write(core, fx, conn, c, m.payload.ops, m.payload.write_concern)


def _client_op(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.ClientOpMessage) -> None:
    write(core, fx, conn, c, [m.payload], None)


def _or_push(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.ORMapPushDiff) -> None:
    or_push(core, fx, conn, c, m.payload)


def _ping(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.Ping) -> None:
    fx.send(conn, tg.Pong(timestamp=m.timestamp, server_time=core.clock()))


def _ignore(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.Message) -> None:
    """The real client sends AUTH twice; TopGun's server ignores the second."""


# -- queries ----------------------------------------------------------------------------------


def _query_sub(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.QuerySub) -> None:
    p = m.payload
    require_map(c, p.map_name, "read")
    raw = bytes(p.query)
    query = Query(conn, p.query_id, p.map_name, parse_spec(raw))
    items = partial(core.maps.live_items, p.map_name)
    fx.send(conn, core.pages.subscribe(core.queries, query, raw, p.fields, items))


def _query_resume(core: CoreView, fx: Effects, conn: int, c: Conn, m: QuerySyncInit) -> None:
    live = core.pages.live_map(conn, m.payload.query_id)
    resp = core.pages.resume(conn, m.payload, core.maps.live_items(live))
    if resp is not None:
        fx.send(conn, resp)


def _query_unsub(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.QueryUnsub) -> None:
    core.queries.unsubscribe(conn, m.payload.query_id)
    core.pages.forget(conn, m.payload.query_id)


def _sql(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.SqlQuery) -> None:
    if not core.sql:
        raise replies.disabled("SQL")

    def may_read(name: str, grants: Grants = c.grants) -> bool:
        return not durable.is_reserved(name) and grants.may_map(name, "read")

    fx.offload.append(sql.prepare(m.payload, conn, may_read, core.maps.live_items))


# -- search -----------------------------------------------------------------------------------


def _search(core: CoreView, fx: Effects, conn: int, c: Conn, m: sv.Search) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    fx.send(conn, core.search.search(m.payload, core.value_of))


def _search_sub(core: CoreView, fx: Effects, conn: int, c: Conn, m: sv.SearchSub) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    fx.send(conn, core.search.subscribe(conn, m.payload, core.value_of))


def _search_unsub(core: CoreView, fx: Effects, conn: int, c: Conn, m: sv.SearchUnsub) -> None:
    core.search.unsubscribe(conn, m.payload.subscription_id)


def _vector(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.VectorSearch) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    fx.send(conn, vector_search(core.vectors, m.payload, core.value_of))


def _hybrid(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.HybridSearch) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    items = core.maps.live_items
    fx.send(conn, hybrid_search(core.search, core.vectors, m.payload, core.value_of, items))


def _hybrid_sub(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.HybridSearchSub) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    first = core.hybrid.subscribe(
        conn, core.search, core.vectors, m.payload, core.value_of, core.maps.live_items
    )
    fx.send(conn, first)


def _hybrid_unsub(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.HybridSearchUnsub) -> None:
    core.hybrid.unsubscribe(conn, m.payload.subscription_id)


def _hybrid_query(
    core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.HybridQuerySubscribe
) -> None:
    require_map(c, m.payload.map_name, "read")
    core.index_inline_step(fx)
    answer = core.hybrid_queries.subscribe(
        conn, core.search, m.payload, core.value_of, core.maps.live_items
    )
    fx.send(conn, answer)


def _hybrid_query_unsub(
    core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.HybridQueryUnsubscribe
) -> None:
    core.hybrid_queries.unsubscribe(conn, m.payload.subscription_id)


# -- the event journal ------------------------------------------------------------------------


def _journal_read(core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.JournalRead) -> None:
    def may_see(name: str, grants: Grants = c.grants) -> bool:
        return grants.may_map(name, "read")

    fx.offload.append(event_journal.reader(core.journal, conn, m, may_see))


def _journal_sub(core: CoreView, fx: Effects, conn: int, c: Conn, m: sv.JournalSubscribe) -> None:
    def may_follow(name: str, grants: Grants = c.grants) -> bool:
        return grants.may_map(name, "read")

    core.journal_subs.subscribe(core.journal, conn, m, may_follow)
    fx.offload.extend(core.journal_subs.tails(core.journal, core.clock()))


def _journal_unsub(
    core: CoreView, fx: Effects, conn: int, c: Conn, m: rq.JournalUnsubscribe
) -> None:
    core.journal_subs.unsubscribe(conn, m.subscription_id)


# -- topics -----------------------------------------------------------------------------------


def _topic_sub(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.TopicSub) -> None:
    topic = m.payload.topic
    topic_name(topic)
    require(c.grants.may_topic(topic, "subscribe"), "subscribe to", topic)
    c.topics.add(topic)
    core.topics.setdefault(topic, set()).add(conn)


def _topic_unsub(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.TopicUnsub) -> None:
    c.topics.discard(m.payload.topic)
    core.topics.get(m.payload.topic, set()).discard(conn)


def _publish(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.TopicPub) -> None:
    p = m.payload
    topic_name(p.topic)
    require(c.grants.may_topic(p.topic, "publish"), "publish to", p.topic)
    targets = tuple(t for t in core.topics.get(p.topic, ()) if t != conn)
    if targets:
        publisher = c.grants.subject or f"connection-{conn}"
        msg = tg.TopicMessage(tg.TopicMessagePayload(p.topic, p.data, publisher, core.clock()))
        fx.out.append(Outbound(targets, msg))


# -- locks and counters -----------------------------------------------------------------------


def _lock(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.LockRequest) -> None:
    p = m.payload
    require(c.grants.may_lock(p.name), "take the lock", p.name)
    ttl = None if p.ttl is None else int(p.ttl)
    core.granted(fx, core.locks.request(conn, p.request_id, p.name, ttl, core.clock()))


def _unlock(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.LockRelease) -> None:
    p = m.payload
    released, grants = core.locks.release(conn, p.name, int(p.fencing_token), core.clock())
    fx.send(conn, tg.LockReleased(tg.LockReleasedPayload(p.name, released, p.request_id)))
    core.granted(fx, grants)


def _counter(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.CounterRequest) -> None:
    p = m.payload
    require(c.grants.may_counter(p.name, "read"), "read the counter", p.name)
    counter = core.counters.get(p.name)
    counter.subscribers.add(conn)
    state = tg.CounterState.of(counter.positive, counter.negative)
    fx.send(conn, tg.CounterResponse(tg.CounterStatePayload(p.name, state)))


def _counter_sync(core: CoreView, fx: Effects, conn: int, c: Conn, m: tg.CounterSync) -> None:
    p = m.payload
    require(c.grants.may_counter(p.name, "write"), "write the counter", p.name)
    if len(p.name) > MAX_COUNTER_NAME:
        raise DecodeError(
            f"a counter name is at most {MAX_COUNTER_NAME} characters", path="payload.name"
        )
    positive, negative = p.state.sides()
    counter = core.counters.get(p.name)
    if counter.merge(positive, negative) and core.persistent:
        rec = durable.counter_record(p.name, counter.positive, counter.negative, core.hlc.now())
        fx.records.append(encode_record(rec))
    counter.subscribers.add(conn)
    state = tg.CounterState.of(counter.positive, counter.negative)
    update = tg.CounterUpdate(tg.CounterStatePayload(p.name, state))
    fx.out.append(Outbound(tuple(sorted(counter.subscribers)), update))


# -- the cluster ------------------------------------------------------------------------------


def _partitions(core: CoreView, fx: Effects, conn: int, c: Conn, m: sv.PartitionMapRequest) -> None:
    if core.nodes is None:
        raise replies.disabled("the partition map")
    now = core.clock()
    core.partitions.observe(core.nodes(), now)
    fx.send(conn, sv.PartitionMap(core.partitions.payload(now, core.hlc.node_id)))


HANDLERS: dict[type, Handler] = {
    tg.OpBatch: _op_batch,
    tg.ClientOpMessage: _client_op,
    SyncInit: merkle_sync,
    MerkleReqBucket: merkle_sync,
    OrMapSyncInit: or_sync,
    tg.ORMapMerkleReqBucket: or_sync,
    tg.ORMapDiffRequest: or_sync,
    tg.ORMapPushDiff: _or_push,
    tg.Ping: _ping,
    tg.QuerySub: _query_sub,
    QuerySyncInit: _query_resume,
    tg.QueryUnsub: _query_unsub,
    rq.SqlQuery: _sql,
    sv.Search: _search,
    sv.SearchSub: _search_sub,
    sv.SearchUnsub: _search_unsub,
    rq.VectorSearch: _vector,
    rq.HybridSearch: _hybrid,
    rq.HybridSearchSub: _hybrid_sub,
    rq.HybridSearchUnsub: _hybrid_unsub,
    rq.HybridQuerySubscribe: _hybrid_query,
    rq.HybridQueryUnsubscribe: _hybrid_query_unsub,
    rq.JournalRead: _journal_read,
    sv.JournalSubscribe: _journal_sub,
    rq.JournalUnsubscribe: _journal_unsub,
    tg.TopicSub: _topic_sub,
    tg.TopicUnsub: _topic_unsub,
    tg.TopicPub: _publish,
    tg.LockRequest: _lock,
    tg.LockRelease: _unlock,
    tg.CounterRequest: _counter,
    tg.CounterSync: _counter_sync,
    sv.PartitionMapRequest: _partitions,
    tg.Auth: _ignore,
    tg.DeviceHello: _ignore,
}
"""Every message type the core acts on; the others go to ``topgun.requests``."""
