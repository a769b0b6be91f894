"""TopGun wire dialect: MsgPack named maps, camelCase fields, internally tagged by ``type``.

``decode(data)`` turns one binary frame into a message Struct, strictly (unknown fields, wrong
types and negative integers are refused with :class:`DecodeError` naming the field);
``encode(message)`` does the reverse. Opaque application values (record values, query bodies,
topic data) stay as their MsgPack bytes (:class:`msgspec.Raw`), so relaying them never decodes
or re-encodes them.

Round trip guarantee (checked against every fixture in ``conformance/topgun``): re-encoding a
decoded frame gives an **equal decoded value**, not equal bytes. The reference encoder writes
every map with a map16 header and whole numbers above 2^32 as float64; msgspec writes the
shortest forms (fixmap, uint64). Integral float64s are accepted wherever an integer is expected
and become ``int``.

``BATCH`` carries ``count`` inner frames in ``data``, each prefixed by a 4-byte big-endian
length (the seed's layout); :func:`split_batch` / :func:`pack_batch` convert.

octosync's one extension, leaf digests for Merkle sync, adds optional fields only
(``SYNC_INIT.leafDigests``, ``SYNC_RESP_ROOT.payload.leafDigests``,
``MERKLE_REQ_BUCKET.payload.have``; see :mod:`octosync.crdt.sync_messages`). They are decoded
as strictly as the rest (column lengths, node indexes and ranges checked, with field paths)
and left out when absent, so a peer that does not offer the extension sees TopGun's bytes.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import (
    NIL,
    JsInt,
    MerkleReqBucket,
    SyncInit,
    SyncResetRequired,
    SyncRespBuckets,
    SyncRespLeaf,
    SyncRespRoot,
    TopGunStruct,
    WireLWWRecord,
    WireTimestamp,
)
from octosync.errors import DecodeError, Oversize
from octosync.wire.strict import too_deep
from octosync.wire.topgun_services import ServiceMessage

MAX_FRAME = 8 * 1024 * 1024


# -- auth -------------------------------------------------------------------------------------


class Auth(TopGunStruct, frozen=True, tag_field="type", tag="AUTH"):
    token: str
    protocol_version: JsInt | None = None

    integral = ("protocol_version",)


class AuthRequired(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_REQUIRED"):
    reason: str | None = None


class AuthAck(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_ACK"):
    connection_id: str | None = None
    server_node_id: str | None = None
    roles: list[str] | None = None
    protocol_version: JsInt | None = None

    integral = ("protocol_version",)


class AuthFail(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_FAIL"):
    reason: str | None = None
    error: str | None = None
    code: JsInt | None = None

    integral = ("code",)


# -- data operations --------------------------------------------------------------------------


class WireORRecord(TopGunStruct, frozen=True):
    value: msgspec.Raw
    timestamp: WireTimestamp
    tag: str
    ttl_ms: JsInt | None = None

    integral = ("ttl_ms",)


class ClientOp(TopGunStruct, frozen=True):
    map_name: str
    key: str
    id: str | None = None
    op_type: str | None = None
    record: WireLWWRecord | None = None
    or_record: WireORRecord | None = None
    or_tag: str | None = None
    write_concern: str | None = None
    timeout: JsInt | None = None
    timestamp: WireTimestamp | None = None
    """The op's HLC; the real client sends it on every op in an ``OP_BATCH``."""
    synced: bool | None = None
    """The real client's own bookkeeping, sent as it is stored (always false on the wire)."""

    integral = ("timeout",)


class ClientOpMessage(TopGunStruct, frozen=True, tag_field="type", tag="CLIENT_OP"):
    payload: ClientOp


class OpBatchPayload(TopGunStruct, frozen=True):
    ops: list[ClientOp]
    write_concern: str | None = None
    timeout: JsInt | None = None

    integral = ("timeout",)


class OpBatch(TopGunStruct, frozen=True, tag_field="type", tag="OP_BATCH"):
    payload: OpBatchPayload


class OpResult(TopGunStruct, frozen=True):
    op_id: str
    success: bool
    achieved_level: str | None = None
    latency_ms: JsInt | None = None
    error: str | None = None

    integral = ("latency_ms",)


class OpAckPayload(TopGunStruct, frozen=True):
    last_id: str
    achieved_level: str | None = None
    results: list[OpResult] | None = None


class OpAck(TopGunStruct, frozen=True, tag_field="type", tag="OP_ACK"):
    payload: OpAckPayload


class OpRejectedPayload(TopGunStruct, frozen=True):
    op_id: str
    reason: str
    code: JsInt | None = None

    integral = ("code",)


class OpRejected(TopGunStruct, frozen=True, tag_field="type", tag="OP_REJECTED"):
    payload: OpRejectedPayload


# -- queries ----------------------------------------------------------------------------------


class QuerySubPayload(TopGunStruct, frozen=True):
    query_id: str
    map_name: str
    query: msgspec.Raw = NIL


class QuerySub(TopGunStruct, frozen=True, tag_field="type", tag="QUERY_SUB"):
    payload: QuerySubPayload


class QueryId(TopGunStruct, frozen=True):
    query_id: str


class QueryUnsub(TopGunStruct, frozen=True, tag_field="type", tag="QUERY_UNSUB"):
    payload: QueryId


class QueryResult(TopGunStruct, frozen=True):
    key: str
    value: msgspec.Raw = NIL


class QueryRespPayload(TopGunStruct, frozen=True):
    query_id: str
    results: list[QueryResult]
    has_more: bool | None = None
    cursor_status: str | None = None
    next_cursor: str | None = None


class QueryResp(TopGunStruct, frozen=True, tag_field="type", tag="QUERY_RESP"):
    payload: QueryRespPayload


class QueryUpdatePayload(TopGunStruct, frozen=True):
    query_id: str
    key: str
    value: msgspec.Raw = NIL
    change_type: str | None = None


class QueryUpdate(TopGunStruct, frozen=True, tag_field="type", tag="QUERY_UPDATE"):
    payload: QueryUpdatePayload


# -- pub/sub ----------------------------------------------------------------------------------


class Topic(TopGunStruct, frozen=True):
    topic: str


class TopicSub(TopGunStruct, frozen=True, tag_field="type", tag="TOPIC_SUB"):
    payload: Topic


class TopicUnsub(TopGunStruct, frozen=True, tag_field="type", tag="TOPIC_UNSUB"):
    payload: Topic


class TopicPubPayload(TopGunStruct, frozen=True):
    topic: str
    data: msgspec.Raw = NIL


class TopicPub(TopGunStruct, frozen=True, tag_field="type", tag="TOPIC_PUB"):
    payload: TopicPubPayload


class TopicMessagePayload(TopGunStruct, frozen=True):
    topic: str
    data: msgspec.Raw = NIL
    publisher_id: str | None = None
    timestamp: JsInt | None = None

    integral = ("timestamp",)


class TopicMessage(TopGunStruct, frozen=True, tag_field="type", tag="TOPIC_MESSAGE"):
    payload: TopicMessagePayload


# -- locks ------------------------------------------------------------------------------------


class LockRequestPayload(TopGunStruct, frozen=True):
    request_id: str
    name: str
    ttl: JsInt | None = None

    integral = ("ttl",)


class LockRequest(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_REQUEST"):
    payload: LockRequestPayload


class LockGrantedPayload(TopGunStruct, frozen=True):
    request_id: str
    fencing_token: JsInt
    name: str | None = None

    integral = ("fencing_token",)


class LockGranted(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_GRANTED"):
    payload: LockGrantedPayload


class LockReleasePayload(TopGunStruct, frozen=True):
    name: str
    fencing_token: JsInt
    request_id: str | None = None

    integral = ("fencing_token",)


class LockRelease(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_RELEASE"):
    payload: LockReleasePayload


class LockReleasedPayload(TopGunStruct, frozen=True):
    name: str
    success: bool
    request_id: str | None = None


class LockReleased(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_RELEASED"):
    payload: LockReleasedPayload


# -- counters ---------------------------------------------------------------------------------


class CounterState(TopGunStruct, frozen=True):
    """PN counter state: per node id, the positive and the negative tallies."""

    p: dict[str, JsInt]
    n: dict[str, JsInt]

    def __post_init__(self) -> None:
        for side, tallies in (("p", self.p), ("n", self.n)):
            for node, count in tallies.items():
                if count < 0 or (isinstance(count, float) and not count.is_integer()):
                    raise ValueError(f"{side}: {node!r} expected a non-negative integer")
                if isinstance(count, float):
                    tallies[node] = int(count)


class CounterName(TopGunStruct, frozen=True):
    name: str


class CounterRequest(TopGunStruct, frozen=True, tag_field="type", tag="COUNTER_REQUEST"):
    payload: CounterName


class CounterStatePayload(TopGunStruct, frozen=True):
    name: str
    state: CounterState


class CounterSync(TopGunStruct, frozen=True, tag_field="type", tag="COUNTER_SYNC"):
    payload: CounterStatePayload


class CounterResponse(TopGunStruct, frozen=True, tag_field="type", tag="COUNTER_RESPONSE"):
    payload: CounterStatePayload


class CounterUpdate(TopGunStruct, frozen=True, tag_field="type", tag="COUNTER_UPDATE"):
    payload: CounterStatePayload


# -- liveness, events, errors -----------------------------------------------------------------


class Ping(TopGunStruct, frozen=True, tag_field="type", tag="PING"):
    timestamp: JsInt

    integral = ("timestamp",)


class Pong(TopGunStruct, frozen=True, tag_field="type", tag="PONG"):
    timestamp: JsInt
    server_time: JsInt | None = None

    integral = ("timestamp", "server_time")


class ServerEventPayload(TopGunStruct, frozen=True):
    map_name: str
    event_type: str
    key: str
    record: WireLWWRecord | None = None
    or_record: WireORRecord | None = None
    or_tag: str | None = None


class ServerEvent(TopGunStruct, frozen=True, tag_field="type", tag="SERVER_EVENT"):
    payload: ServerEventPayload


class ServerBatchEventPayload(TopGunStruct, frozen=True):
    events: list[ServerEventPayload]


class ServerBatchEvent(TopGunStruct, frozen=True, tag_field="type", tag="SERVER_BATCH_EVENT"):
    payload: ServerBatchEventPayload


class ErrorPayload(TopGunStruct, frozen=True):
    code: JsInt
    message: str
    details: msgspec.Raw = NIL

    integral = ("code",)


class Error(TopGunStruct, frozen=True, tag_field="type", tag="ERROR"):
    payload: ErrorPayload


class Batch(TopGunStruct, frozen=True, tag_field="type", tag="BATCH"):
    count: JsInt
    data: bytes

    integral = ("count",)


Message = (
    Auth
    | AuthRequired
    | AuthAck
    | AuthFail
    | ClientOpMessage
    | OpBatch
    | OpAck
    | OpRejected
    | SyncInit
    | SyncRespRoot
    | MerkleReqBucket
    | SyncRespBuckets
    | SyncRespLeaf
    | SyncResetRequired
    | QuerySub
    | QueryUnsub
    | QueryResp
    | QueryUpdate
    | TopicSub
    | TopicUnsub
    | TopicPub
    | TopicMessage
    | LockRequest
    | LockGranted
    | LockRelease
    | LockReleased
    | CounterRequest
    | CounterSync
    | CounterResponse
    | CounterUpdate
    | Ping
    | Pong
    | ServerEvent
    | ServerBatchEvent
    | Error
    | Batch
    | ServiceMessage
)

_decoder: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)
_encoder = msgspec.msgpack.Encoder()
_AT = re.compile(r" - at `\$\.?(.*)`$")
_FIELD = re.compile(r"^(\w+(?:\.\w+)*): ")


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def decode(data: bytes, *, max_size: int = MAX_FRAME) -> Message:
    """One frame to its message; :class:`DecodeError` (with the field path) if it is invalid."""
    if len(data) > max_size:
        raise Oversize(f"frame of {len(data)} bytes exceeds {max_size}")
    try:
        return _decoder.decode(data)
    except UnicodeDecodeError as exc:  # a str field holding bytes that are not UTF-8
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}") from exc
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        text = str(exc)
        found = _AT.search(text)
        path = found.group(1) if found else ""
        text = _AT.sub("", text)
        # Range checks made after decoding say "<wireName>: ..."; extend the path with it.
        field = _FIELD.match(text)
        if field is not None:
            path = f"{path}.{field.group(1)}" if path else field.group(1)
        raise DecodeError(text, path=path or None) from exc
    except RecursionError:
        raise too_deep("topgun") from None


# -- BATCH framing ----------------------------------------------------------------------------

_LEN = struct.Struct(">I")


def pack_batch(frames: Iterable[bytes]) -> Batch:
    """A ``BATCH`` of already-encoded frames (encode once, pack the same bytes for many)."""
    parts = list(frames)
    return Batch(len(parts), b"".join(_LEN.pack(len(f)) + f for f in parts))


def split_batch(batch: Batch) -> list[bytes]:
    """The inner frames of a ``BATCH``; the lengths must tile ``data`` exactly ``count`` times."""
    data, pos = batch.data, 0
    out: list[bytes] = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecodeError("truncated length prefix", path=f"data[{len(out)}]")
        (size,) = _LEN.unpack_from(data, pos)
        pos += 4
        if pos + size > len(data):
            raise DecodeError(
                f"inner frame of {size} bytes overruns the batch", path=f"data[{len(out)}]"
            )
        out.append(data[pos : pos + size])
        pos += size
    if len(out) != batch.count:
        raise DecodeError(f"count says {batch.count} frames, data holds {len(out)}", path="count")
    return out


def unpack_batch(batch: Batch) -> list[Message]:
    return [decode(frame) for frame in split_batch(batch)]


# -- ops <-> records --------------------------------------------------------------------------


def client_op_to_record(op: ClientOp) -> OpRecord:
    """The journal's op record for a TopGun client op (PUT/REMOVE, OR_ADD/OR_REMOVE)."""
    if op.or_record is not None:
        r = op.or_record
        ts = r.timestamp.to_ts()
        return OpRecord(op.map_name, op.key, OpKind.OR_ADD, bytes(r.value), ts, ts.node_id, r.tag)
    if op.record is None:
        raise DecodeError("op has neither record nor orRecord", path="payload.record")
    ts = op.record.timestamp.to_ts()
    if op.or_tag is not None:
        tags = _encoder.encode([op.or_tag])
        return OpRecord(
            op.map_name, op.key, OpKind.OR_REMOVE, tags, ts, ts.node_id, op.id or str(ts)
        )
    removed = op.op_type == "REMOVE" or bytes(op.record.value) == bytes(NIL)
    kind = OpKind.REMOVE if removed else OpKind.PUT
    value = b"" if removed else bytes(op.record.value)
    return OpRecord(op.map_name, op.key, kind, value, ts, ts.node_id, op.id or str(ts))


__all__ = [
    "Batch",
    "ClientOp",
    "Message",
    "client_op_to_record",
    "decode",
    "encode",
    "pack_batch",
    "split_batch",
    "unpack_batch",
]
