"""TopGun's HTTP sync (``POST /sync``, MsgPack bodies), for ``HttpSyncProvider``: a client
without a WebSocket sends its ops, the maps it follows with the timestamp it last synced, its
queries and searches, and gets the ack, the records changed since, and the results.

Shapes follow TopGun's ``http-sync-schemas``; decoding is as strict as the rest of the
dialect (unknown fields refused, the failing field named).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from octosync.crdt.sync_messages import NIL, TopGunStruct, WireLWWRecord, WireTimestamp
from octosync.errors import DecodeError
from octosync.js_numbers import JsUint
from octosync.wire.topgun import ClientOp, OpResult, QueryResult, decode_error
from octosync.wire.topgun_services import SearchOptions, SearchResult


class SyncMapEntry(TopGunStruct, frozen=True):
    map_name: str
    last_sync_timestamp: WireTimestamp


class HttpQueryRequest(TopGunStruct, frozen=True):
    query_id: str
    map_name: str
    filter: msgspec.Raw = NIL
    limit: JsUint | None = None
    offset: JsUint | None = None
    cursor: str | None = None


class HttpSearchRequest(TopGunStruct, frozen=True):
    search_id: str
    map_name: str
    query: str
    options: SearchOptions | None = None


class HttpSyncRequest(TopGunStruct, frozen=True):
    client_id: str
    client_hlc: WireTimestamp
    operations: list[ClientOp] | None = None
    sync_maps: list[SyncMapEntry] | None = None
    queries: list[HttpQueryRequest] | None = None
    searches: list[HttpSearchRequest] | None = None


class DeltaRecord(TopGunStruct, frozen=True):
    key: str
    record: WireLWWRecord
    event_type: Literal["PUT", "REMOVE"]


class MapDelta(TopGunStruct, frozen=True):
    map_name: str
    records: list[DeltaRecord]
    server_sync_timestamp: WireTimestamp


class HttpQueryResult(TopGunStruct, frozen=True):
    query_id: str
    results: list[QueryResult]
    has_more: bool | None = None
    next_cursor: str | None = None


class HttpSearchResult(TopGunStruct, frozen=True):
    search_id: str
    results: list[SearchResult]
    total_count: JsUint | None = None


class HttpSyncError(TopGunStruct, frozen=True):
    code: JsUint
    message: str
    context: str | None = None


class HttpAck(TopGunStruct, frozen=True):
    last_id: str
    results: list[OpResult] | None = None


class HttpSyncResponse(TopGunStruct, frozen=True):
    server_hlc: WireTimestamp
    ack: HttpAck | None = None
    deltas: list[MapDelta] | None = None
    query_results: list[HttpQueryResult] | None = None
    search_results: list[HttpSearchResult] | None = None
    errors: list[HttpSyncError] | None = None


_decoder = msgspec.msgpack.Decoder(HttpSyncRequest)
_encoder = msgspec.msgpack.Encoder()


def decode_request(data: bytes) -> HttpSyncRequest:
    try:
        return _decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        err = decode_error(exc)  # the field it names, or the body when it names none
        raise DecodeError(err.message, path=err.path or "body") from None


def encode_response(response: HttpSyncResponse) -> bytes:
    return _encoder.encode(response)
