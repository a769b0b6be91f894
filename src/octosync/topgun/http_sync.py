"""TopGun's HTTP sync as the core's rules (sans-I/O): one request, one response.

The server gives each request a connection of its own for its duration (the token's grants,
no subscriptions kept): the ops go through the same write path as a WebSocket's ``OP_BATCH``
(their ``OP_ACK`` and ``OP_REJECTED`` become ``ack`` and ``errors``), each followed map
answers the LWW records that changed here since the client's ``lastSyncTimestamp``, in the
order they arrived (``topgun.arrivals``: not by their own timestamps, which are the writers'
clocks), at most :data:`MAX_DELTA_RECORDS` (``serverSyncTimestamp`` is where the next request
resumes), and queries and searches are answered as ``QUERY_SUB`` and ``SEARCH`` are (a
query's ``filter`` is its ``where``, or a whole query with ``where``/``predicate``/``sort``;
``offset`` is not supported: pages go by ``cursor``). A part the token may not read is an
entry in ``errors``, naming it in ``context``; the rest is answered.
"""

from __future__ import annotations

from typing import Any

import msgspec

from octosync.crdt.op import OpKind
from octosync.crdt.sync_messages import NIL, WireLWWRecord, WireTimestamp
from octosync.errors import LimitExceeded
from octosync.topgun import durable
from octosync.topgun.core import Grants, TopGunCore
from octosync.topgun.effects import AllSucceeded, EventRuns
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th
from octosync.wire import topgun_services as sv

MAX_DELTA_RECORDS = 5_000
MAX_PARTS = 64
"""Followed maps, queries and searches per request, each."""
_SPEC_KEYS = {"where", "predicate", "sort", "limit", "cursor", "fields", "groupBy"}
_DEC = msgspec.msgpack.Decoder()
_ENC = msgspec.msgpack.Encoder()


def check(req: th.HttpSyncRequest) -> None:
    for name, part in (("syncMaps", req.sync_maps), ("queries", req.queries)):
        if len(part or ()) > MAX_PARTS:
            raise LimitExceeded(f"at most {MAX_PARTS} {name} per request", path=f"body.{name}")
    if len(req.searches or ()) > MAX_PARTS:
        raise LimitExceeded(f"at most {MAX_PARTS} searches per request", path="body.searches")


def maps_named(req: th.HttpSyncRequest) -> list[str]:
    """Every map the request writes, syncs, queries or searches (in a cluster holding maps by
    interest, it waits until the node holds them)."""
    names = [op.map_name for op in req.operations or ()]
    names += [s.map_name for s in req.sync_maps or ()]
    names += [q.map_name for q in req.queries or ()]
    names += [q.map_name for q in req.searches or ()]
    return sorted(set(names))


def op_batch(req: th.HttpSyncRequest) -> tg.OpBatch | None:
    return tg.OpBatch(tg.OpBatchPayload(req.operations)) if req.operations else None


def answer(
    core: TopGunCore,
    conn: int,
    grants: Grants,
    req: th.HttpSyncRequest,
    op_replies: list[tg.Message],
) -> th.HttpSyncResponse:
    """The response, once the ops' replies (``OP_ACK``, ``OP_REJECTED``) are known."""
    errors: list[th.HttpSyncError] = []
    ack = None
    for m in op_replies:
        if isinstance(m, tg.OpAck):
            ack = th.HttpAck(m.payload.last_id, m.payload.results)
        elif isinstance(m, tg.OpRejected):
            code = int(m.payload.code or 400)
            errors.append(th.HttpSyncError(code, m.payload.reason, m.payload.op_id))
    deltas = []
    for entry in req.sync_maps or ():
        name = entry.map_name
        if durable.is_reserved(name) or not grants.may_map(name, "read"):
            errors.append(th.HttpSyncError(403, f"no read grant on map {name!r}", name))
            continue
        deltas.append(delta(core, name, entry.last_sync_timestamp))
    queries = []
    for q in req.queries or ():
        spec = _spec(q)
        raw = msgspec.Raw(_ENC.encode(spec))
        reply = _one(core, conn, tg.QuerySub(tg.QuerySubPayload(q.query_id, q.map_name, raw)))
        core.handle(conn, tg.QueryUnsub(tg.QueryId(q.query_id)))
        if isinstance(reply, tg.QueryResp) and reply.payload.error is None:
            p = reply.payload
            queries.append(th.HttpQueryResult(q.query_id, p.results, p.has_more, p.next_cursor))
        else:
            errors.append(th.HttpSyncError(400, _why(reply), q.query_id))
    searches = []
    for s in req.searches or ():
        ask = sv.Search(sv.SearchPayload(s.search_id, s.map_name, s.query, s.options))
        found = _one(core, conn, ask)
        if isinstance(found, sv.SearchResp) and found.payload.error is None:
            p2 = found.payload
            searches.append(th.HttpSearchResult(s.search_id, p2.results, p2.total_count))
        else:
            errors.append(th.HttpSyncError(400, _why(found), s.search_id))
    return th.HttpSyncResponse(
        WireTimestamp.of(core.hlc.now()),
        ack,
        deltas or None,
        queries or None,
        searches or None,
        errors or None,
    )


def delta(core: TopGunCore, name: str, since: WireTimestamp) -> th.MapDelta:
    """The LWW records of ``name`` changed after ``since`` here, in the order they arrived
    (``topgun.arrivals``), at most :data:`MAX_DELTA_RECORDS`."""
    store = core.maps.store
    core.arrivals.follow(name, dict.fromkeys(row.key for row in store.rows(name)))
    keys, resume = core.arrivals.since(name, since, MAX_DELTA_RECORDS)
    records = []
    for key in keys:
        rec = store.lww_winner(name, key)
        if rec is None:
            continue  # an OR key: HTTP sync carries LWW records
        put = rec.op is OpKind.PUT
        value = msgspec.Raw(rec.value) if put else NIL
        record = WireLWWRecord(value, WireTimestamp.of(rec.ts))
        records.append(th.DeltaRecord(rec.key, record, "PUT" if put else "REMOVE"))
    return th.MapDelta(name, records, resume)


def _spec(q: th.HttpQueryRequest) -> dict[str, Any]:
    given = None if bytes(q.filter) == bytes(NIL) else _DEC.decode(bytes(q.filter))
    if isinstance(given, dict) and given.keys() & _SPEC_KEYS:
        spec = dict(given)
    else:
        spec = {} if given is None else {"where": given}
    if q.limit is not None:
        spec["limit"] = int(q.limit)
    if q.cursor is not None:
        spec["cursor"] = q.cursor
    return spec


def _one(core: TopGunCore, conn: int, message: tg.Message) -> tg.Message | None:
    fx = core.handle(conn, message)
    out = [
        m
        for ob in fx.out
        if conn in ob.targets and not isinstance(m := ob.message, (AllSucceeded, EventRuns))
    ]
    return out[0] if out else None


def _why(reply: tg.Message | None) -> str:
    payload = getattr(reply, "payload", None)
    return str(getattr(payload, "error", None) or "no answer")
