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

``BATCH`` carries inner frames in ``data``, each prefixed by a 4-byte big-endian length (the
seed's layout); :func:`split_batch` / :func:`pack_batch` convert. The frames are counted from
the length prefixes, never from the declared ``count`` (which must agree), and at most
:data:`MAX_BATCH_ITEMS` are taken, as TopGun's server bounds them.

octosync's one extension, leaf digests for Merkle sync, adds optional fields only
(``SYNC_INIT.leafDigests``, ``SYNC_RESP_ROOT.payload.leafDigests``,
``MERKLE_REQ_BUCKET.payload.have``; see :mod:`octosync.crdt.sync_messages`). They are decoded
as strictly as the rest (column lengths, node indexes and ranges checked, with field paths)
and left out when absent, so a peer that does not offer the extension sees TopGun's bytes.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Iterable

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import (
    NIL,
    Hash32,
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
from octosync.crdt.timestamp import Timestamp
from octosync.errors import DecodeError, LimitExceeded, Oversize, RemoteProtocolError
from octosync.js_numbers import JsHash32, JsUint
from octosync.wire.strict import too_deep
from octosync.wire.topgun_requests import RequestMessage
from octosync.wire.topgun_services import ServiceMessage

MAX_FRAME = 8 * 1024 * 1024


# -- auth -------------------------------------------------------------------------------------


class Auth(TopGunStruct, frozen=True, tag_field="type", tag="AUTH"):
    token: str
    protocol_version: JsUint | None = None
    device_token: str | None = None
    """The real client re-presents a device credential it was given earlier."""


class AuthRequired(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_REQUIRED"):
    reason: str | None = None


class AuthAck(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_ACK"):
    connection_id: str | None = None
    server_node_id: str | None = None
    roles: list[str] | None = None
    protocol_version: JsUint | None = None
    user_id: str | None = None
    device_id: str | None = None
    """The device identity bound to the connection (stable across reconnects)."""
    device_token: str | None = None
    """Set only when the server minted a new device credential: the client keeps it."""


class AuthFail(TopGunStruct, frozen=True, tag_field="type", tag="AUTH_FAIL"):
    reason: str | None = None
    error: str | None = None
    code: JsUint | None = None


class DeviceHello(TopGunStruct, frozen=True, tag_field="type", tag="DEVICE_HELLO"):
    """What the real client sends instead of ``AUTH`` when it has no token."""

    device_token: str | None = None


class DeviceAck(TopGunStruct, frozen=True, tag_field="type", tag="DEVICE_ACK"):
    device_id: str | None = None
    device_token: str | None = None


# -- data operations --------------------------------------------------------------------------


class WireORRecord(TopGunStruct, frozen=True):
    value: msgspec.Raw
    timestamp: WireTimestamp
    tag: str
    ttl_ms: JsUint | None = None


class ClientOp(TopGunStruct, frozen=True):
    map_name: str
    key: str
    id: str | None = None
    op_type: str | None = None
    record: WireLWWRecord | None = None
    or_record: WireORRecord | None = None
    or_tag: str | None = None
    write_concern: str | None = None
    timeout: JsUint | None = None
    timestamp: WireTimestamp | None = None
    """The op's HLC; the real client sends it on every op in an ``OP_BATCH``."""
    synced: bool | None = None
    """The real client's own bookkeeping, sent as it is stored (always false on the wire)."""


class ClientOpMessage(TopGunStruct, frozen=True, tag_field="type", tag="CLIENT_OP"):
    payload: ClientOp


class OpBatchPayload(TopGunStruct, frozen=True):
    ops: list[ClientOp]
    write_concern: str | None = None
    timeout: JsUint | None = None


class OpBatch(TopGunStruct, frozen=True, tag_field="type", tag="OP_BATCH"):
    payload: OpBatchPayload


class OpResult(TopGunStruct, frozen=True):
    op_id: str
    success: bool
    achieved_level: str | None = None
    latency_ms: JsUint | None = None
    error: str | None = None


class OpAckPayload(TopGunStruct, frozen=True):
    last_id: str
    achieved_level: str | None = None
    results: list[OpResult] | None = None


class OpAck(TopGunStruct, frozen=True, tag_field="type", tag="OP_ACK"):
    payload: OpAckPayload


class OpRejectedPayload(TopGunStruct, frozen=True):
    op_id: str
    reason: str
    code: JsUint | None = None


class OpRejected(TopGunStruct, frozen=True, tag_field="type", tag="OP_REJECTED"):
    payload: OpRejectedPayload


# -- OR-map sync -------------------------------------------------------------------------------


class ORMapEntry(TopGunStruct, frozen=True):
    """One key of an OR map: its live records and the tags removed from it."""

    key: str
    records: list[WireORRecord]
    tombstones: list[str]


class ORMapRootPayload(TopGunStruct, frozen=True):
    map_name: str
    root_hash: JsHash32
    timestamp: WireTimestamp | None = None


class ORMapSyncRespRoot(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_SYNC_RESP_ROOT"):
    payload: ORMapRootPayload


class ORMapPath(TopGunStruct, frozen=True):
    map_name: str
    path: str


class ORMapMerkleReqBucket(
    TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_MERKLE_REQ_BUCKET"
):
    payload: ORMapPath


class ORMapBucketsPayload(TopGunStruct, frozen=True):
    map_name: str
    path: str
    buckets: dict[str, Hash32]


class ORMapSyncRespBuckets(
    TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_SYNC_RESP_BUCKETS"
):
    payload: ORMapBucketsPayload


class ORMapLeafPayload(TopGunStruct, frozen=True):
    map_name: str
    path: str
    entries: list[ORMapEntry]


class ORMapSyncRespLeaf(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_SYNC_RESP_LEAF"):
    payload: ORMapLeafPayload


class ORMapKeys(TopGunStruct, frozen=True):
    map_name: str
    keys: list[str]


class ORMapDiffRequest(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_DIFF_REQUEST"):
    payload: ORMapKeys


class ORMapEntries(TopGunStruct, frozen=True):
    map_name: str
    entries: list[ORMapEntry]


class ORMapDiffResponse(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_DIFF_RESPONSE"):
    payload: ORMapEntries


class ORMapPushDiff(TopGunStruct, frozen=True, tag_field="type", tag="ORMAP_PUSH_DIFF"):
    payload: ORMapEntries


# -- queries ----------------------------------------------------------------------------------


class QuerySubPayload(TopGunStruct, frozen=True):
    query_id: str
    map_name: str
    query: msgspec.Raw = NIL
    fields: list[str] | None = None
    """Projection: only these top-level fields of each value come back."""


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
    merkle_root_hash: Hash32 | None = None
    error: str | None = None
    """Set (with ``code``) when the query was refused; ``results`` is then empty."""
    code: str | None = None


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
    timestamp: JsUint | None = None


class TopicMessage(TopGunStruct, frozen=True, tag_field="type", tag="TOPIC_MESSAGE"):
    payload: TopicMessagePayload


# -- locks ------------------------------------------------------------------------------------


class LockRequestPayload(TopGunStruct, frozen=True):
    request_id: str
    name: str
    ttl: JsUint | None = None


class LockRequest(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_REQUEST"):
    payload: LockRequestPayload


class LockGrantedPayload(TopGunStruct, frozen=True):
    request_id: str
    fencing_token: JsUint
    name: str | None = None


class LockGranted(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_GRANTED"):
    payload: LockGrantedPayload


class LockReleasePayload(TopGunStruct, frozen=True):
    name: str
    fencing_token: JsUint
    request_id: str | None = None


class LockRelease(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_RELEASE"):
    payload: LockReleasePayload


class LockReleasedPayload(TopGunStruct, frozen=True):
    name: str
    success: bool
    request_id: str | None = None


class LockReleased(TopGunStruct, frozen=True, tag_field="type", tag="LOCK_RELEASED"):
    payload: LockReleasedPayload


# -- counters ---------------------------------------------------------------------------------


Tallies = dict[str, JsUint]


class CounterState(TopGunStruct, frozen=True):
    """PN counter state: per node id, the positive and the negative tallies.

    The real client sends and reads ``{positive, negative}``; TopGun's schemas say ``{p, n}``.
    Either shape is accepted (not both); :meth:`of` builds the client's shape.
    """

    positive: Tallies | None = None
    negative: Tallies | None = None
    p: Tallies | None = None
    n: Tallies | None = None

    def __post_init__(self) -> None:
        long_form = self.positive is not None or self.negative is not None
        short_form = self.p is not None or self.n is not None
        if long_form and short_form:
            raise ValueError("state: either positive/negative or p/n, not both")

    def sides(self) -> tuple[dict[str, int], dict[str, int]]:
        """``(positive, negative)`` whatever shape arrived."""
        pos = self.positive if self.positive is not None else self.p
        neg = self.negative if self.negative is not None else self.n
        return dict(pos or {}), dict(neg or {})

    @classmethod
    def of(cls, positive: dict[str, int], negative: dict[str, int]) -> CounterState:
        return cls(positive=dict(positive), negative=dict(negative))


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
    timestamp: JsUint


class Pong(TopGunStruct, frozen=True, tag_field="type", tag="PONG"):
    timestamp: JsUint
    server_time: JsUint | None = None


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


class _EncodedEvents(TopGunStruct, frozen=True):
    events: list[msgspec.Raw]


class _EncodedBatchEvent(TopGunStruct, frozen=True, tag_field="type", tag="SERVER_BATCH_EVENT"):
    """``ServerBatchEvent`` with events encoded already: the same bytes, built by copying."""

    payload: _EncodedEvents


def encode_event(event: ServerEventPayload) -> bytes:
    """One event's payload, for :func:`encode_events`."""
    return _encoder.encode(event)


def encode_events(events: list[msgspec.Raw]) -> bytes:
    """The ``SERVER_EVENT`` (one) or ``SERVER_BATCH_EVENT`` (several) message for events
    encoded once by :func:`encode_event` and shared by every message that carries them."""
    if len(events) == 1:
        return _encoder.encode(_EncodedEvent(events[0]))
    return _encoder.encode(_EncodedBatchEvent(_EncodedEvents(events)))


class _EncodedEvent(TopGunStruct, frozen=True, tag_field="type", tag="SERVER_EVENT"):
    payload: msgspec.Raw


def encode_event_run(events: list[ServerEventPayload]) -> bytes:
    """Events encoded back to back, in one encode call (a client batch's events), for
    :func:`join_event_runs`: the MsgPack array of them without its header."""
    return _encoder.encode(events)[_array_header_size(len(events)) :]


def join_event_runs(runs: list[tuple[int, bytes]]) -> bytes:
    """The ``SERVER_EVENT`` (one event) or ``SERVER_BATCH_EVENT`` message carrying the
    events of ``runs`` ((how many, :func:`encode_event_run` bytes)) in order: the same bytes
    as :func:`encode_events` of those events, built by copying."""
    count = sum(n for n, _ in runs)
    if count == 1:
        single = next(body for n, body in runs if n)
        return _encoder.encode(_EncodedEvent(msgspec.Raw(single)))
    return b"".join([_BATCH_EVENT_HEAD, _array_header(count), *(body for _, body in runs)])


def _array_header_size(n: int) -> int:
    return 1 if n < 16 else 3 if n < 1 << 16 else 5


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


class ErrorPayload(TopGunStruct, frozen=True):
    code: JsUint
    message: str
    details: msgspec.Raw = NIL


class Error(TopGunStruct, frozen=True, tag_field="type", tag="ERROR"):
    payload: ErrorPayload


class Batch(TopGunStruct, frozen=True, tag_field="type", tag="BATCH"):
    count: JsUint
    data: bytes


Message = (
    Auth
    | AuthRequired
    | AuthAck
    | AuthFail
    | DeviceHello
    | DeviceAck
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
    | ORMapSyncRespRoot
    | ORMapMerkleReqBucket
    | ORMapSyncRespBuckets
    | ORMapSyncRespLeaf
    | ORMapDiffRequest
    | ORMapDiffResponse
    | ORMapPushDiff
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
    | RequestMessage
)

_decoder: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)
_encoder = msgspec.msgpack.Encoder()
_BATCH_EVENT_HEAD = _encoder.encode(_EncodedBatchEvent(_EncodedEvents([])))[:-1]
"""``SERVER_BATCH_EVENT`` up to its events array (the empty one's header, 0x90, cut off)."""
_NIL_BYTES = bytes(NIL)
_AT = re.compile(r" - at `\$\.?(.*)`$")
_FIELD = re.compile(r"^(\w+(?:\.\w+)*): ")


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def encode_all_succeeded(last_id: str, level: str, op_ids: list[str]) -> bytes:
    """``encode`` of the ``OP_ACK`` whose every op succeeded at ``level`` (one
    ``OpResult(op_id, True, level)`` per id, in order), built by joining each result's bytes
    around its encoded id instead of making a Struct per op: every client batch with an explicit
    write concern is acked this way."""
    head = _encoder.encode(OpAck(OpAckPayload(last_id, level, [])))
    assert head.endswith(b"\x90")  # ``results`` is the last field of the last field
    before, after = _result_template(level)
    ids = [_encoder.encode(op_id) for op_id in op_ids]
    return b"".join([head[:-1], _array_header(len(ids)), *(before + i + after for i in ids)])


_SENTINEL = "\x00op-id\x00"


@functools.lru_cache(maxsize=16)  # levels are a handful of names
def _result_template(level: str) -> tuple[bytes, bytes]:
    """The bytes of ``OpResult(<id>, True, level)`` before and after the encoded id."""
    whole = _encoder.encode(OpResult(_SENTINEL, True, level))
    marker = _encoder.encode(_SENTINEL)
    at = whole.index(marker)
    return whole[:at], whole[at + len(marker) :]


def decode(data: bytes, *, max_size: int = MAX_FRAME) -> Message:
    """One frame to its message; :class:`DecodeError` (with the field path) if it is invalid."""
    if len(data) > max_size:
        raise Oversize(f"frame of {len(data)} bytes exceeds {max_size}")
    try:
        return _decoder.decode(data)
    except UnicodeDecodeError as exc:  # a str field holding bytes that are not UTF-8
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}") from exc
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise decode_error(exc) from exc
    except RecursionError:
        raise too_deep("topgun") from None


def decode_error(exc: msgspec.ValidationError | msgspec.DecodeError) -> DecodeError:
    """msgspec's refusal as :class:`DecodeError`, its ``- at `$.x.y``` suffix as the path."""
    text = str(exc)
    found = _AT.search(text)
    path = found.group(1) if found else ""
    text = _AT.sub("", text)
    # Checks made after decoding (``__post_init__``) say "<wireName>: ..."; extend the path.
    field = _FIELD.match(text)
    if field is not None:
        path = f"{path}.{field.group(1)}" if path else field.group(1)
    return DecodeError(text, path=path or None)


# -- BATCH framing ----------------------------------------------------------------------------

_LEN = struct.Struct(">I")


def pack_batch(frames: Iterable[bytes]) -> Batch:
    """A ``BATCH`` of already-encoded frames (encode once, pack the same bytes for many)."""
    parts = list(frames)
    return Batch(len(parts), b"".join(_LEN.pack(len(f)) + f for f in parts))


MAX_BATCH_ITEMS = 8192
"""Inner frames one ``BATCH`` may carry (TopGun's server's bound): each is a decode and a
dispatch, so a frame of many tiny items must not cost without end."""


def split_batch(batch: Batch, *, max_items: int = MAX_BATCH_ITEMS) -> list[bytes]:
    """The inner frames of a ``BATCH``, counted from the length prefixes: they must tile
    ``data`` exactly (:class:`DecodeError` naming the item), number at most ``max_items``
    (:class:`LimitExceeded`, found after reading at most one prefix past the bound), and agree
    with the declared ``count``, which is checked last and never sizes anything."""
    data, pos = batch.data, 0
    out: list[bytes] = []
    while pos < len(data):
        if len(out) == max_items:
            raise LimitExceeded(
                f"a BATCH carries at most {max_items} inner frames", path=f"data[{max_items}]"
            )
        if len(data) - pos < 4:
            raise DecodeError("truncated length prefix", path=f"data[{len(out)}]")
        (size,) = _LEN.unpack_from(data, pos)
        pos += 4
        if size > len(data) - pos:
            raise DecodeError(
                f"inner frame of {size} bytes overruns the batch", path=f"data[{len(out)}]"
            )
        out.append(data[pos : pos + size])
        pos += size
    if len(out) != batch.count:
        raise DecodeError(f"count says {batch.count} frames, data holds {len(out)}", path="count")
    return out


def unpack_batch(batch: Batch, *, max_size: int = MAX_FRAME) -> list[Message]:
    """Every inner message of a ``BATCH``, or a typed error naming the first bad one
    (``data[i]...``); a ``BATCH`` inside a ``BATCH`` is refused (no nesting to recurse on)."""
    messages: list[Message] = []
    for i, frame in enumerate(split_batch(batch)):
        try:
            inner = decode(frame, max_size=max_size)
        except RemoteProtocolError as err:  # DecodeError, Oversize, too deep
            path = f"data[{i}]" if err.path is None else f"data[{i}].{err.path}"
            raise type(err)(err.message, path=path) from err
        if isinstance(inner, Batch):
            raise DecodeError("a BATCH may not hold a BATCH", path=f"data[{i}].type")
        messages.append(inner)
    return messages


# -- ops <-> records --------------------------------------------------------------------------


def client_op_to_record(op: ClientOp) -> OpRecord:
    """The journal's op record for a TopGun client op (PUT/REMOVE, OR_ADD/OR_REMOVE).

    Client op ids (``"1"``, ``"2"``, ...) are per client, so they never identify a record:
    an LWW op is identified by its HLC (unique per node), an OR add by its tag, an OR remove
    by the tag it removes (removing a tag twice is removing it once).
    """
    record = op.record
    if record is not None and op.or_record is None and op.or_tag is None:
        value = bytes(record.value)
        hlc = record.timestamp
        m, c, node = hlc.millis, hlc.counter, hlc.node_id
        if op.op_type != "REMOVE" and value != _NIL_BYTES:
            ts = Timestamp(m, c, node)  # a PUT, the usual op: ``str(ts)`` spelled out
            return OpRecord(op.map_name, op.key, OpKind.PUT, value, ts, node, f"{m}:{c}:{node}")
    if op.or_record is not None:
        r = op.or_record
        ts = r.timestamp.to_ts()
        return OpRecord(op.map_name, op.key, OpKind.OR_ADD, bytes(r.value), ts, ts.node_id, r.tag)
    if op.or_tag is not None:
        stamp = op.record.timestamp if op.record is not None else op.timestamp
        if stamp is None:
            raise DecodeError("an OR_REMOVE op needs a timestamp", path="payload.timestamp")
        ts = stamp.to_ts()
        tags = _encoder.encode([op.or_tag])
        return OpRecord(
            op.map_name, op.key, OpKind.OR_REMOVE, tags, ts, ts.node_id, f"rm:{op.or_tag}"
        )
    record = op.record
    if record is None:
        raise DecodeError("op has neither record nor orRecord", path="payload.record")
    ts = record.timestamp.to_ts()
    value = bytes(record.value)
    if op.op_type == "REMOVE" or value == _NIL_BYTES:
        return OpRecord(op.map_name, op.key, OpKind.REMOVE, b"", ts, ts.node_id, str(ts))
    return OpRecord(op.map_name, op.key, OpKind.PUT, value, ts, ts.node_id, str(ts))


__all__ = [
    "MAX_BATCH_ITEMS",
    "Batch",
    "ClientOp",
    "Message",
    "client_op_to_record",
    "decode",
    "decode_error",
    "encode",
    "pack_batch",
    "split_batch",
    "unpack_batch",
]
