"""The correlated answer to a refused TopGun request.

TopGun's client waits for each request's own response, matched by its id (``queryId``,
``requestId``, ``id``, ``subscriptionId``), and only logs an ``ERROR``: a refusal sent as
``ERROR`` leaves ``sql()``, ``search()`` or ``vectorSearch()`` waiting 30 s and a query
subscription forever. So a refusal of a request that has a response goes back as that response
with its ``error`` (and, where the schema has one, ``code``: ``FEATURE_DISABLED`` for a feature
this server does not serve, as TopGun's server answers SQL when it is built without it).
A write batch refused whole (an unknown write concern) gets an ``OP_REJECTED`` per op.
Requests without a response type (subscriptions to topics, counters, Merkle sync) keep the
``ERROR`` message; so does a refused ``LOCK_REQUEST``: the only correlated answer,
``LOCK_RELEASED {success: false}``, is read by TopGun's client as a grant without a token, so
its ``lock()`` would report a lock it does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from octosync.errors import FeatureDisabled, Forbidden, OctosyncError
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def wire_code(err: OctosyncError) -> str:
    """The machine-readable ``code`` of a refusal: ``FEATURE_DISABLED``, ``FORBIDDEN``,
    ``DECODE_ERROR``... (the error's stable name in TopGun's upper snake case)."""
    return _CAMEL.sub("_", err.name).upper()


def reason(err: OctosyncError) -> str:
    return f"{err.name}: {err.message}"


Reply = Callable[[str, str, str, list[str]], tg.Message]
"""(request id, reason, code, keys) -> the response that carries the refusal."""

_REPLIES: dict[str, tuple[str | None, str, Reply]] = {
    # tag: (where the id is: "payload" or None for a flat message, its field, the response)
    "QUERY_SUB": (
        "payload",
        "queryId",
        lambda i, why, code, _k: tg.QueryResp(tg.QueryRespPayload(i, [], error=why, code=code)),
    ),
    "QUERY_SYNC_INIT": (
        "payload",
        "queryId",
        lambda i, why, code, _k: tg.QueryResp(tg.QueryRespPayload(i, [], error=why, code=code)),
    ),
    "SEARCH": (
        "payload",
        "requestId",
        lambda i, why, _c, _k: sv.SearchResp(sv.SearchRespPayload(i, [], 0, why)),
    ),
    "SEARCH_SUB": (
        "payload",
        "subscriptionId",
        lambda i, why, _c, _k: sv.SearchResp(sv.SearchRespPayload(i, [], 0, why)),
    ),
    "SQL_QUERY": (
        "payload",
        "queryId",
        lambda i, why, code, _k: rq.SqlQueryResp(rq.SqlQueryRespPayload(i, [], [], why, code)),
    ),
    "VECTOR_SEARCH": (
        "payload",
        "id",
        lambda i, why, _c, _k: rq.VectorSearchResp(rq.VectorSearchRespPayload(i, [], 0, 0, why)),
    ),
    "HYBRID_SEARCH": (
        "payload",
        "requestId",
        lambda i, why, _c, _k: rq.HybridSearchResp(rq.HybridSearchRespPayload(i, [], 0.0, why)),
    ),
    "HYBRID_SEARCH_SUB": (
        "payload",
        "subscriptionId",
        lambda i, why, _c, _k: rq.HybridSearchResp(rq.HybridSearchRespPayload(i, [], 0.0, why)),
    ),
    "HYBRID_QUERY_SUBSCRIBE": (
        "payload",
        "subscriptionId",
        lambda i, why, code, _k: rq.HybridQueryResp(
            rq.HybridQueryRespPayload(i, [], error=why, code=code)
        ),
    ),
    "JOURNAL_READ": (
        None,
        "requestId",
        lambda i, why, _c, _k: rq.JournalReadResponse(i, [], False, why),
    ),
    "ENTRY_PROCESS": (
        None,
        "requestId",
        lambda i, why, _c, _k: sv.EntryProcessResponse(i, False, error=why),
    ),
    "ENTRY_PROCESS_BATCH": (
        None,
        "requestId",
        lambda i, why, _c, keys: rq.EntryProcessBatchResponse(
            i, dict.fromkeys(keys, rq.EntryProcessKeyResult(False, error=why))
        ),
    ),
    "REGISTER_RESOLVER": (
        None,
        "requestId",
        lambda i, why, _c, _k: rq.RegisterResolverResponse(i, False, why),
    ),
    "UNREGISTER_RESOLVER": (
        None,
        "requestId",
        lambda i, why, _c, _k: rq.UnregisterResolverResponse(i, False, why),
    ),
    "LIST_RESOLVERS": (None, "requestId", lambda i, _w, _c, _k: sv.ListResolversResponse(i, [])),
}
"""Every request with a response of its own (TopGun's schemas), and where its id is."""


def refusals(message: tg.Message, err: OctosyncError) -> list[tg.Message]:
    """Every response that carries ``err`` back to ``message``: one for a request, one
    ``OP_REJECTED`` per op of a refused batch (the client's write-concern promises wait on
    them; the ops stay pending), none for a message without a response of its own."""
    ops: list[tg.ClientOp]
    match message:
        case tg.OpBatch(payload=p):
            ops = p.ops
        case tg.ClientOpMessage(payload=op):
            ops = [op]
        case _:
            reply = refusal(message, err)
            return [] if reply is None else [reply]
    code = 403 if isinstance(err, Forbidden) else 400
    why = reason(err)
    return [tg.OpRejected(tg.OpRejectedPayload(op.id, why, code)) for op in ops if op.id]


def refusal(message: tg.Message, err: OctosyncError) -> tg.Message | None:
    """The response that carries ``err`` back to the request ``message``, or None when the
    request has no response of its own."""
    entry = _REPLIES.get(message.__struct_config__.tag)  # type: ignore[arg-type]
    if entry is None:
        return None
    where, id_field, reply = entry
    holder = getattr(message, "payload") if where else message  # noqa: B009
    fields = dict(zip(holder.__struct_encode_fields__, holder.__struct_fields__, strict=True))
    ident = getattr(holder, fields[id_field])
    keys = list(getattr(holder, "keys", None) or [])
    return reply(ident, reason(err), wire_code(err), keys)


_TOP = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])


def refusal_of_frame(data: bytes, err: OctosyncError) -> tg.Message | None:
    """The response that carries ``err`` (a decode error) back to the request in ``data``,
    when its type and id can still be read: a request whose fields are wrong is answered in
    its own response like any other refusal. Reads only the top two levels, as raw bytes."""
    try:
        top = _TOP.decode(data)
        tag = msgspec.msgpack.decode(top["type"], type=str)
        entry = _REPLIES.get(tag)
        if entry is None:
            return None
        where, id_field, reply = entry
        holder = _TOP.decode(top[where]) if where else top
        ident = msgspec.msgpack.decode(holder[id_field], type=str)
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
        return None
    return reply(ident, reason(err), wire_code(err), [])


def disabled(feature: str) -> FeatureDisabled:
    return FeatureDisabled(f"{feature} is not served by this server", path="type")
