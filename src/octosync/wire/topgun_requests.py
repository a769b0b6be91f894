"""TopGun's request/response messages beyond sync, queries and services: SQL, vector and
hybrid search, journal reads, entry-processor batches, resolver removal, query resume and the
client's confirmed-apply cursor.

Every request here carries a correlation id (``queryId``, ``id``, ``requestId``,
``subscriptionId``) and its response carries it back, with ``error`` set when the request
failed or the feature is not served, so no caller waits for its timeout. Shapes follow
TopGun's schemas (``packages/core/src/schemas``) and what its real client sends.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from octosync.crdt.sync_messages import NIL, Hash32, TopGunStruct
from octosync.errors import DecodeError
from octosync.js_numbers import JsUint
from octosync.wire.topgun_services import ChangeType, JournalEventData, JournalEventType

SearchMethod = Literal["exact", "fullText", "semantic"]

VectorBytes = bytes | dict[str, int]
"""A vector as little-endian float32 bytes. The real client's MsgPack encoder sends its
``Uint8Array`` as a map of index to byte; :func:`vector_bytes` turns either into bytes."""


def vector_bytes(value: VectorBytes, path: str) -> bytes:
    """The bytes of a vector field, strictly: a map must hold exactly the indexes 0..n-1,
    each a byte."""
    if isinstance(value, bytes):
        return value
    try:
        out = bytes(value[str(i)] for i in range(len(value)))
    except (KeyError, ValueError, TypeError):
        raise DecodeError("a vector map needs the keys 0..n-1, each a byte", path=path) from None
    return out


# -- confirmed apply and query resume ---------------------------------------------------------


class ClientApplyAck(TopGunStruct, frozen=True, tag_field="type", tag="CLIENT_APPLY_ACK"):
    """The highest server epoch the client has applied durably (TopGun's tombstone frontier)."""

    cursor: JsUint


class QuerySyncInitPayload(TopGunStruct, frozen=True):
    query_id: str
    root_hash: Hash32


class QuerySyncInit(TopGunStruct, frozen=True, tag_field="type", tag="QUERY_SYNC_INIT"):
    payload: QuerySyncInitPayload


# -- SQL --------------------------------------------------------------------------------------


class SqlQueryPayload(TopGunStruct, frozen=True):
    sql: str
    query_id: str


class SqlQuery(TopGunStruct, frozen=True, tag_field="type", tag="SQL_QUERY"):
    payload: SqlQueryPayload


class SqlQueryRespPayload(TopGunStruct, frozen=True):
    query_id: str
    columns: list[str]
    rows: list[list[msgspec.Raw]]
    error: str | None = None
    code: str | None = None


class SqlQueryResp(TopGunStruct, frozen=True, tag_field="type", tag="SQL_QUERY_RESP"):
    payload: SqlQueryRespPayload


# -- vector search ----------------------------------------------------------------------------


class VectorSearchOptions(TopGunStruct, frozen=True):
    include_value: bool | None = None
    include_vectors: bool | None = None
    min_score: float | None = None
    filter: msgspec.Raw = NIL


class VectorSearchPayload(TopGunStruct, frozen=True):
    id: str
    map_name: str
    query_vector: VectorBytes
    k: JsUint
    index_name: str | None = None
    ef_search: JsUint | None = None
    options: VectorSearchOptions | None = None


class VectorSearch(TopGunStruct, frozen=True, tag_field="type", tag="VECTOR_SEARCH"):
    payload: VectorSearchPayload


class VectorSearchResult(TopGunStruct, frozen=True):
    key: str
    score: float
    value: msgspec.Raw = NIL
    vector: bytes | None = None


class VectorSearchRespPayload(TopGunStruct, frozen=True):
    id: str
    results: list[VectorSearchResult]
    total_candidates: JsUint
    search_time_ms: JsUint
    error: str | None = None


class VectorSearchResp(TopGunStruct, frozen=True, tag_field="type", tag="VECTOR_SEARCH_RESP"):
    payload: VectorSearchRespPayload


# -- hybrid search ----------------------------------------------------------------------------


class HybridQuery(TopGunStruct, frozen=True):
    """What a one-shot and a live hybrid search both carry."""

    map_name: str
    query_text: str
    methods: list[SearchMethod]
    k: JsUint
    query_vector: VectorBytes | None = None
    predicate: msgspec.Raw = NIL
    include_value: bool | None = None
    min_score: float | None = None


class HybridSearchPayload(HybridQuery, frozen=True, kw_only=True):
    request_id: str


class HybridSearch(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_SEARCH"):
    payload: HybridSearchPayload


class HybridSearchResult(TopGunStruct, frozen=True):
    key: str
    score: float
    method_scores: dict[SearchMethod, float]
    value: msgspec.Raw = NIL


class HybridSearchRespPayload(TopGunStruct, frozen=True):
    request_id: str
    results: list[HybridSearchResult]
    search_time_ms: float
    error: str | None = None


class HybridSearchResp(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_SEARCH_RESP"):
    payload: HybridSearchRespPayload


class HybridSearchSubPayload(HybridQuery, frozen=True, kw_only=True):
    subscription_id: str


class HybridSearchSub(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_SEARCH_SUB"):
    payload: HybridSearchSubPayload


class HybridSearchUpdatePayload(TopGunStruct, frozen=True):
    subscription_id: str
    key: str
    score: float
    method_scores: dict[SearchMethod, float]
    change_type: ChangeType
    value: msgspec.Raw = NIL


class HybridSearchUpdate(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_SEARCH_UPDATE"):
    payload: HybridSearchUpdatePayload


class HybridSubscriptionId(TopGunStruct, frozen=True):
    subscription_id: str


class HybridSearchUnsub(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_SEARCH_UNSUB"):
    payload: HybridSubscriptionId


class HybridQuerySubscribePayload(TopGunStruct, frozen=True):
    subscription_id: str
    map_name: str
    predicate: msgspec.Raw = NIL
    where: msgspec.Raw = NIL
    sort: msgspec.Raw = NIL
    limit: JsUint | None = None
    cursor: msgspec.Raw = NIL


class HybridQuerySubscribe(
    TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_QUERY_SUBSCRIBE"
):
    payload: HybridQuerySubscribePayload


class HybridQueryUnsubscribe(
    TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_QUERY_UNSUBSCRIBE"
):
    payload: HybridSubscriptionId


class HybridQueryResult(TopGunStruct, frozen=True):
    key: str
    value: msgspec.Raw
    score: float
    matched_terms: list[str]


CursorStatus = Literal["valid", "expired", "invalid", "none"]


class HybridQueryRespPayload(TopGunStruct, frozen=True):
    """TopGun's ``HybridQueryRespPayloadSchema`` (its client keeps the handle's
    ``updatePaginationInfo`` for it); ``error`` and ``code`` carry a refusal, as in
    ``QUERY_RESP``."""

    subscription_id: str
    results: list[HybridQueryResult]
    next_cursor: str | None = None
    has_more: bool | None = None
    cursor_status: CursorStatus | None = None
    error: str | None = None
    code: str | None = None


class HybridQueryResp(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_QUERY_RESP"):
    payload: HybridQueryRespPayload


class HybridQueryDeltaPayload(TopGunStruct, frozen=True):
    """TopGun's ``HybridQueryDeltaPayloadSchema``: one key entering, changing in or leaving a
    live hybrid query (``value`` nil on ``LEAVE``)."""

    subscription_id: str
    key: str
    type: ChangeType
    value: msgspec.Raw = NIL
    score: float | None = None
    matched_terms: list[str] | None = None


class HybridQueryDelta(TopGunStruct, frozen=True, tag_field="type", tag="HYBRID_QUERY_DELTA"):
    payload: HybridQueryDeltaPayload


# -- event journal (flat messages) ------------------------------------------------------------


class JournalRead(TopGunStruct, frozen=True, tag_field="type", tag="JOURNAL_READ"):
    request_id: str
    from_sequence: str
    limit: JsUint | None = None
    map_name: str | None = None


class JournalReadResponse(TopGunStruct, frozen=True, tag_field="type", tag="JOURNAL_READ_RESPONSE"):
    request_id: str
    events: list[JournalEventData]
    has_more: bool
    error: str | None = None
    """Not in TopGun's schema (the client ignores it): set when the read was refused."""


class JournalUnsubscribe(TopGunStruct, frozen=True, tag_field="type", tag="JOURNAL_UNSUBSCRIBE"):
    subscription_id: str


# -- entry processors and resolvers (flat messages) -------------------------------------------


class EntryProcessorSpec(TopGunStruct, frozen=True):
    name: str
    code: str
    args: msgspec.Raw = NIL


class EntryProcessBatch(TopGunStruct, frozen=True, tag_field="type", tag="ENTRY_PROCESS_BATCH"):
    request_id: str
    map_name: str
    keys: list[str]
    processor: EntryProcessorSpec


class EntryProcessKeyResult(TopGunStruct, frozen=True):
    success: bool
    result: msgspec.Raw = NIL
    new_value: msgspec.Raw = NIL
    error: str | None = None


class EntryProcessBatchResponse(
    TopGunStruct, frozen=True, tag_field="type", tag="ENTRY_PROCESS_BATCH_RESPONSE"
):
    request_id: str
    results: dict[str, EntryProcessKeyResult]


class RegisterResolverResponse(
    TopGunStruct, frozen=True, tag_field="type", tag="REGISTER_RESOLVER_RESPONSE"
):
    request_id: str
    success: bool
    error: str | None = None


class UnregisterResolver(TopGunStruct, frozen=True, tag_field="type", tag="UNREGISTER_RESOLVER"):
    request_id: str
    map_name: str
    resolver_name: str


class UnregisterResolverResponse(
    TopGunStruct, frozen=True, tag_field="type", tag="UNREGISTER_RESOLVER_RESPONSE"
):
    request_id: str
    success: bool
    error: str | None = None


RequestMessage = (
    ClientApplyAck
    | QuerySyncInit
    | SqlQuery
    | SqlQueryResp
    | VectorSearch
    | VectorSearchResp
    | HybridSearch
    | HybridSearchResp
    | HybridSearchSub
    | HybridSearchUpdate
    | HybridSearchUnsub
    | HybridQuerySubscribe
    | HybridQueryUnsubscribe
    | HybridQueryResp
    | HybridQueryDelta
    | JournalRead
    | JournalReadResponse
    | JournalUnsubscribe
    | EntryProcessBatch
    | EntryProcessBatchResponse
    | RegisterResolverResponse
    | UnregisterResolver
    | UnregisterResolverResponse
)

__all__ = ["JournalEventType", "RequestMessage"]
