"""TopGun's server-feature messages: cluster routing, full-text search, the event journal, entry
processors, conflict resolvers, OR-map sync start and tombstone GC.

octosync's ``/topgun`` face serves OR-map sync start and tombstone GC (``octosync.topgun``) and
none of the other features; it decodes them as strictly as the rest of the dialect (so a TopGun
peer that sends one gets a typed "not supported" answer instead of a decode failure) and can
encode them for tests and relays. Shapes follow TopGun's Rust message
definitions (``packages/core-rust/src/messages``) and are checked against its cross-language
fixtures. Application values (record values, processor arguments) stay raw MsgPack.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from octosync.crdt.sync_messages import NIL, Hash32, TopGunStruct, WireTimestamp
from octosync.js_numbers import JsUint

ChangeType = Literal["ENTER", "UPDATE", "LEAVE"]
JournalEventType = Literal["PUT", "UPDATE", "DELETE"]


# -- partition map ----------------------------------------------------------------------------


class NodeEndpoints(TopGunStruct, frozen=True):
    websocket: str
    http: str | None = None


class NodeInfo(TopGunStruct, frozen=True):
    node_id: str
    endpoints: NodeEndpoints
    status: Literal["ACTIVE", "JOINING", "LEAVING", "SUSPECTED", "FAILED"]


class PartitionInfo(TopGunStruct, frozen=True):
    partition_id: JsUint
    owner_node_id: str
    backup_node_ids: list[str]


class PartitionMapPayload(TopGunStruct, frozen=True):
    version: JsUint
    partition_count: JsUint
    nodes: list[NodeInfo]
    partitions: list[PartitionInfo]
    generated_at: JsUint


class PartitionMap(TopGunStruct, frozen=True, tag_field="type", tag="PARTITION_MAP"):
    payload: PartitionMapPayload


class PartitionMapRequestPayload(TopGunStruct, frozen=True):
    current_version: JsUint | None = None


class PartitionMapRequest(TopGunStruct, frozen=True, tag_field="type", tag="PARTITION_MAP_REQUEST"):
    payload: PartitionMapRequestPayload | None = None


# -- search -----------------------------------------------------------------------------------


class SearchOptions(TopGunStruct, frozen=True):
    limit: JsUint | None = None
    min_score: float | None = None
    boost: dict[str, float] | None = None


class SearchResult(TopGunStruct, frozen=True):
    key: str
    value: msgspec.Raw
    score: float
    matched_terms: list[str]


class SearchPayload(TopGunStruct, frozen=True):
    request_id: str
    map_name: str
    query: str
    options: SearchOptions | None = None


class Search(TopGunStruct, frozen=True, tag_field="type", tag="SEARCH"):
    payload: SearchPayload


class SearchRespPayload(TopGunStruct, frozen=True):
    request_id: str
    results: list[SearchResult]
    total_count: JsUint
    error: str | None = None


class SearchResp(TopGunStruct, frozen=True, tag_field="type", tag="SEARCH_RESP"):
    payload: SearchRespPayload


class SearchSubPayload(TopGunStruct, frozen=True):
    subscription_id: str
    map_name: str
    query: str
    options: SearchOptions | None = None


class SearchSub(TopGunStruct, frozen=True, tag_field="type", tag="SEARCH_SUB"):
    payload: SearchSubPayload


class SearchUpdatePayload(TopGunStruct, frozen=True):
    subscription_id: str
    key: str
    value: msgspec.Raw
    score: float
    matched_terms: list[str]
    change_type: ChangeType


class SearchUpdate(TopGunStruct, frozen=True, tag_field="type", tag="SEARCH_UPDATE"):
    payload: SearchUpdatePayload


class SubscriptionId(TopGunStruct, frozen=True):
    subscription_id: str


class SearchUnsub(TopGunStruct, frozen=True, tag_field="type", tag="SEARCH_UNSUB"):
    payload: SubscriptionId


# -- cluster-internal search and subscriptions ------------------------------------------------


class ClusterSearchOptions(TopGunStruct, frozen=True):
    limit: JsUint
    min_score: float | None = None
    boost: dict[str, float] | None = None
    include_matched_terms: bool | None = None
    after_score: float | None = None
    after_key: str | None = None


class ClusterSearchReqPayload(TopGunStruct, frozen=True):
    request_id: str
    map_name: str
    query: str
    options: ClusterSearchOptions
    timeout_ms: JsUint | None = None


class ClusterSearchReq(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SEARCH_REQ"):
    payload: ClusterSearchReqPayload


class ClusterSearchResult(TopGunStruct, frozen=True):
    key: str
    value: msgspec.Raw
    score: float
    matched_terms: list[str] | None = None


class ClusterSearchRespPayload(TopGunStruct, frozen=True):
    request_id: str
    node_id: str
    results: list[ClusterSearchResult]
    total_hits: JsUint
    execution_time_ms: JsUint
    error: str | None = None


class ClusterSearchResp(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SEARCH_RESP"):
    payload: ClusterSearchRespPayload


class ClusterSearchSubscribePayload(TopGunStruct, frozen=True):
    subscription_id: str
    map_name: str
    query: str
    options: SearchOptions | None = None


class ClusterSearchSubscribe(
    TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SEARCH_SUBSCRIBE"
):
    payload: ClusterSearchSubscribePayload


class ClusterSearchUnsubscribe(
    TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SEARCH_UNSUBSCRIBE"
):
    payload: SubscriptionId


class ClusterSearchUpdatePayload(TopGunStruct, frozen=True):
    subscription_id: str
    node_id: str
    key: str
    value: msgspec.Raw
    score: float
    change_type: ChangeType
    matched_terms: list[str] | None = None


class ClusterSearchUpdate(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SEARCH_UPDATE"):
    payload: ClusterSearchUpdatePayload


class ClusterSubRegisterPayload(TopGunStruct, frozen=True):
    subscription_id: str
    coordinator_node_id: str
    map_name: str
    sub_type: Literal["SEARCH", "QUERY"] = msgspec.field(name="type")
    search_query: str | None = None
    search_options: SearchOptions | None = None
    query_predicate: msgspec.Raw = NIL
    query_sort: dict[str, Literal["asc", "desc"]] | None = None


class ClusterSubRegister(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SUB_REGISTER"):
    payload: ClusterSubRegisterPayload


class ClusterSubAckResult(TopGunStruct, frozen=True):
    key: str
    value: msgspec.Raw
    score: float | None = None
    matched_terms: list[str] | None = None


class ClusterSubAckPayload(TopGunStruct, frozen=True):
    subscription_id: str
    node_id: str
    success: bool
    error: str | None = None
    initial_results: list[ClusterSubAckResult] | None = None
    total_hits: JsUint | None = None


class ClusterSubAck(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SUB_ACK"):
    payload: ClusterSubAckPayload


class ClusterSubUpdatePayload(TopGunStruct, frozen=True):
    subscription_id: str
    source_node_id: str
    key: str
    value: msgspec.Raw
    change_type: ChangeType
    timestamp: JsUint
    score: float | None = None
    matched_terms: list[str] | None = None


class ClusterSubUpdate(TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SUB_UPDATE"):
    payload: ClusterSubUpdatePayload


class ClusterSubUnregister(
    TopGunStruct, frozen=True, tag_field="type", tag="CLUSTER_SUB_UNREGISTER"
):
    payload: SubscriptionId


# -- entry processors, resolvers, journal (flat messages: no payload wrapper) -----------------


class EntryProcessor(TopGunStruct, frozen=True):
    name: str
    code: str
    args: msgspec.Raw = NIL


class EntryProcess(TopGunStruct, frozen=True, tag_field="type", tag="ENTRY_PROCESS"):
    request_id: str
    map_name: str
    key: str
    processor: EntryProcessor


class EntryProcessResponse(
    TopGunStruct, frozen=True, tag_field="type", tag="ENTRY_PROCESS_RESPONSE"
):
    request_id: str
    success: bool
    result: msgspec.Raw = NIL
    new_value: msgspec.Raw = NIL
    error: str | None = None


class ConflictResolver(TopGunStruct, frozen=True):
    name: str
    code: str
    priority: JsUint | None = None
    key_pattern: str | None = None


class RegisterResolver(TopGunStruct, frozen=True, tag_field="type", tag="REGISTER_RESOLVER"):
    request_id: str
    map_name: str
    resolver: ConflictResolver


class ListResolvers(TopGunStruct, frozen=True, tag_field="type", tag="LIST_RESOLVERS"):
    request_id: str
    map_name: str | None = None


class ResolverInfo(TopGunStruct, frozen=True):
    map_name: str
    name: str
    priority: JsUint | None = None
    key_pattern: str | None = None


class ListResolversResponse(
    TopGunStruct, frozen=True, tag_field="type", tag="LIST_RESOLVERS_RESPONSE"
):
    request_id: str
    resolvers: list[ResolverInfo]


class MergeRejected(TopGunStruct, frozen=True, tag_field="type", tag="MERGE_REJECTED"):
    map_name: str
    key: str
    attempted_value: msgspec.Raw
    reason: str
    timestamp: WireTimestamp


class JournalEventData(TopGunStruct, frozen=True):
    sequence: str
    event_type: JournalEventType = msgspec.field(name="type")
    map_name: str
    key: str
    timestamp: WireTimestamp
    node_id: str
    value: msgspec.Raw = NIL
    previous_value: msgspec.Raw = NIL
    metadata: dict[str, msgspec.Raw] | None = None


class JournalEvent(TopGunStruct, frozen=True, tag_field="type", tag="JOURNAL_EVENT"):
    event: JournalEventData


class JournalSubscribe(TopGunStruct, frozen=True, tag_field="type", tag="JOURNAL_SUBSCRIBE"):
    request_id: str
    from_sequence: str | None = None
    map_name: str | None = None
    types: list[JournalEventType] | None = None


# -- sync start and GC ------------------------------------------------------------------------


class OrMapSyncInit(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_SYNC_INIT"):
    map_name: str
    root_hash: Hash32
    bucket_hashes: dict[str, Hash32]
    last_sync_timestamp: JsUint | None = None
    claimed_epoch: JsUint | None = None


class GcPrunePayload(TopGunStruct, frozen=True):
    older_than: WireTimestamp


class GcPrune(TopGunStruct, frozen=True, tag_field="type", tag="GC_PRUNE"):
    payload: GcPrunePayload


ServiceMessage = (
    PartitionMap
    | PartitionMapRequest
    | Search
    | SearchResp
    | SearchSub
    | SearchUpdate
    | SearchUnsub
    | ClusterSearchReq
    | ClusterSearchResp
    | ClusterSearchSubscribe
    | ClusterSearchUnsubscribe
    | ClusterSearchUpdate
    | ClusterSubRegister
    | ClusterSubAck
    | ClusterSubUpdate
    | ClusterSubUnregister
    | EntryProcess
    | EntryProcessResponse
    | RegisterResolver
    | ListResolvers
    | ListResolversResponse
    | MergeRejected
    | JournalEvent
    | JournalSubscribe
    | OrMapSyncInit
    | GcPrune
)
