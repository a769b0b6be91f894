"""The correlated answer to a refused TopGun request.

TopGun's client waits for each request's own response, matched by its id (``queryId``,
``requestId``, ``id``, ``subscriptionId``), and only logs an ``ERROR``: a refusal sent as
``ERROR`` leaves ``sql()``, ``search()`` or ``vectorSearch()`` waiting 30 s and a query
subscription forever. So a refusal of a request that has a response goes back as that response
with its ``error`` (and, where the schema has one, ``code``: ``FEATURE_DISABLED`` for a feature
this server does not serve, as TopGun's server answers SQL when it is built without it).
Requests without a response type (subscriptions to topics, counters, Merkle sync) keep the
``ERROR`` message.
"""

from __future__ import annotations

import re

from octosync.errors import FeatureDisabled, OctosyncError
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


def refusal(message: tg.Message, err: OctosyncError) -> tg.Message | None:
    """The response that carries ``err`` back to the request ``message``, or None when the
    request has no response of its own."""
    why = reason(err)
    match message:
        case tg.QuerySub(payload=p):
            payload = tg.QueryRespPayload(p.query_id, [], error=why, code=wire_code(err))
            return tg.QueryResp(payload)
        case rq.QuerySyncInit(payload=p):
            payload = tg.QueryRespPayload(p.query_id, [], error=why, code=wire_code(err))
            return tg.QueryResp(payload)
        case sv.Search(payload=p):
            return sv.SearchResp(sv.SearchRespPayload(p.request_id, [], 0, why))
        case sv.SearchSub(payload=p):
            return sv.SearchResp(sv.SearchRespPayload(p.subscription_id, [], 0, why))
        case rq.SqlQuery(payload=p):
            return rq.SqlQueryResp(rq.SqlQueryRespPayload(p.query_id, [], [], why, wire_code(err)))
        case rq.VectorSearch(payload=p):
            return rq.VectorSearchResp(rq.VectorSearchRespPayload(p.id, [], 0, 0, why))
        case rq.HybridSearch(payload=p):
            return rq.HybridSearchResp(rq.HybridSearchRespPayload(p.request_id, [], 0.0, why))
        case rq.HybridSearchSub(payload=p):
            sub = p.subscription_id
            return rq.HybridSearchResp(rq.HybridSearchRespPayload(sub, [], 0.0, why))
        case rq.JournalRead(request_id=request_id):
            return rq.JournalReadResponse(request_id, [], False, why)
        case sv.EntryProcess(request_id=request_id):
            return sv.EntryProcessResponse(request_id, False, error=why)
        case rq.EntryProcessBatch(request_id=request_id, keys=keys):
            failed = rq.EntryProcessKeyResult(False, error=why)
            return rq.EntryProcessBatchResponse(request_id, dict.fromkeys(keys, failed))
        case sv.RegisterResolver(request_id=request_id):
            return rq.RegisterResolverResponse(request_id, False, why)
        case rq.UnregisterResolver(request_id=request_id):
            return rq.UnregisterResolverResponse(request_id, False, why)
        case sv.ListResolvers(request_id=request_id):
            return sv.ListResolversResponse(request_id, [])
    return None


def disabled(feature: str) -> FeatureDisabled:
    return FeatureDisabled(f"{feature} is not served by this server", path="type")
