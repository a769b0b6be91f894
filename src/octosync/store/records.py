"""What the journal holds: one tagged record kind per row, encoded once as MsgPack.

Every row has a ``kind`` and a ``scope`` (the map name for ops, the stream id for frames, the
chain or dataspace name for their activity), so reads by map or by stream use one index
whatever the kind. A later kind is a new Struct plus one entry in ``_KINDS``; the table does
not change. Chain and dataspace records are what those faces saw, for the pipeline: recovery
never reads them, and a trim removes them once exported.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import InvalidRecord, JournalCorrupt
from octosync.hub.limits import MAX_EPOCH, MAX_STREAM_NAME
from octosync.ipc.messages import CrdtOp

Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_EPOCH)]
StreamId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STREAM_NAME)]
"""The hub refuses what these bounds refuse (``hub.limits``), before it changes state."""


FrameCodec = Literal["json", "json_tagged", "msgpack"]
"""The lazily dialects a producer may send in (``wire.DIALECTS``)."""


class StreamFrame(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A frame the hub accepted on a stream: a snapshot at ``epoch`` or a delta ``base -> epoch``.

    ``payload`` is the frame as the producer sent it, in the lazily dialect ``codec`` (the
    journal never re-encodes). With no ``codec`` it is the server's own form: a WVP frame's
    canonical CBOR (the producer's graph and ops spliced in verbatim), or a state-plane message
    as MsgPack of its Struct (checkpoints, and records written before ``codec`` existed).
    ``state_hash`` is the producer's hash of the state after the frame, when it sent one. A
    snapshot has ``base_epoch == epoch``; a delta has ``base_epoch < epoch``. ``producer``
    names the producing connection (``<server run>.<connection>``) so that the report can count
    producers and tell a producer's resync from a new producer; records written before it
    existed (and records written without a hub) have none.
    """

    stream: StreamId
    base_epoch: Epoch
    epoch: Epoch
    snapshot: bool
    payload: bytes
    state_hash: bytes | None = None
    codec: FrameCodec | None = None
    producer: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class StreamDropped(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The hub let ``stream``'s state go (its producer left and the retention passed): a
    restart rebuilds the stream only from frames journaled after this record."""

    stream: StreamId


class PlaneOps(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """CRDT plane ops the server accepted on the multi-writer stream ``stream`` (one writer's
    frame, or a batch another node of the cluster accepted). Plane merges are idempotent and
    commutative, so a restart merges every record of the stream in any order; they are never
    trimmed (each is the only copy of its ops), only compacted: a stream's records replaced by
    the entries they merge to (``store.plane_compaction``). ``position``: on another node's
    batch, the cluster op stream's sequence it ends (``cluster/planes.py``), so a restarted
    node replays the stream from after it (a compaction keeps the highest)."""

    stream: StreamId
    ops: tuple[CrdtOp, ...]
    position: int | None = None


class YjsUpdate(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A Yjs update the ``/yjs`` face accepted on ``document`` (journaled before it is applied,
    fanned out or confirmed). Yjs updates commute and apply idempotently, so a restart applies
    every record of a document in any order; they are never trimmed (each may be the only copy
    of its edits), only compacted: a document's records replaced by one merged update
    (``store.yjs_compaction``). ``writer``: the connection, ``<server run>.<connection>``
    (none on a compacted record, nor on another node's). ``position``: on updates another node
    of the cluster accepted, the cluster's Yjs op stream's sequence they end
    (``cluster/yjs.py``), so a restarted node replays the stream from after it (a compaction
    keeps the highest)."""

    document: StreamId
    update: bytes
    writer: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    position: int | None = None


ChainName = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]{1,64}$")]
Connection = Annotated[str, msgspec.Meta(max_length=64)]
Sequencer = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class ChainEventSeen(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A device event the chain face relayed to ``chain``'s head (journaled before it is
    relayed). A device re-sends the events it holds when it bootstraps again, so one
    ``(chain, device, device_sequencer)`` may be journaled more than once: its first record
    is when the server first saw it."""

    chain: ChainName
    device: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    device_sequencer: Sequencer
    name: Annotated[str, msgspec.Meta(max_length=256)]
    payload: str
    connection: Connection | None = None


class ChainStateSeen(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A state change of ``chain`` as its head sent it to the face's devices (journaled once
    per sequencer by a server run): the merge patch (or replacement) as JSON text, and per
    device the device sequencers it consumed."""

    chain: ChainName
    sequencer: Sequencer
    replace: bool
    change: str
    consumed: dict[str, tuple[Sequencer, ...]] = {}


DataspaceAction = Literal["assert", "retract", "message"]
"""As ``syndicate.relay.Action``."""


class DataspaceEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An assertion, retraction or message a dataspace took (after caveats). ``handle`` is
    the server's handle of the assertion (0 for a message), so a retraction pairs with its
    assertion; ``label`` is the record's label (empty for a value that is not a record);
    ``value`` is the Preserves text of what was asserted or sent (empty for a retraction;
    entity references read ``#:ref``); ``peer`` is the connection that caused it, as
    ``<server run>.<connection>`` (a connection's retractions when it closes name it too)."""

    dataspace: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STREAM_NAME)]
    action: DataspaceAction
    handle: Annotated[int, msgspec.Meta(ge=0)]
    label: str
    value: str
    peer: Connection | None = None


Record = (
    OpRecord
    | StreamFrame
    | StreamDropped
    | PlaneOps
    | ChainEventSeen
    | ChainStateSeen
    | DataspaceEvent
    | YjsUpdate
)

KIND_OP: Final = "op"
KIND_FRAME: Final = "frame"
KIND_DROP: Final = "drop"
KIND_PLANE: Final = "plane"
KIND_CHAIN_EVENT: Final = "chain_event"
KIND_CHAIN_STATE: Final = "chain_state"
KIND_DATASPACE: Final = "dataspace"
KIND_YJS: Final = "yjs"
_SCOPES: dict[type[Record], tuple[str, str]] = {
    OpRecord: (KIND_OP, "map"),
    StreamFrame: (KIND_FRAME, "stream"),
    StreamDropped: (KIND_DROP, "stream"),
    PlaneOps: (KIND_PLANE, "stream"),
    ChainEventSeen: (KIND_CHAIN_EVENT, "chain"),
    ChainStateSeen: (KIND_CHAIN_STATE, "chain"),
    DataspaceEvent: (KIND_DATASPACE, "dataspace"),
    YjsUpdate: (KIND_YJS, "document"),
}
"""Each record type's kind and the field that is its scope."""
_KINDS: dict[str, type[Record]] = {kind: cls for cls, (kind, _) in _SCOPES.items()}
_ENCODER = msgspec.msgpack.Encoder()
_DECODERS = {kind: msgspec.msgpack.Decoder(cls) for kind, cls in _KINDS.items()}


class EncodedRecord(msgspec.Struct, frozen=True):
    """A record ready for the table: encoded in the caller's thread, before the writer sees it."""

    kind: str
    scope: str
    body: bytes


def _encode_checked(record: Record) -> bytes:
    """Encode once, then decode the bytes strictly: a Struct built in Python is not validated."""
    body = _ENCODER.encode(record)
    try:
        msgspec.msgpack.decode(body, type=type(record))
    except msgspec.ValidationError as exc:
        raise InvalidRecord(str(exc), path=_path_of(exc)) from None
    if isinstance(record, StreamFrame):
        if record.snapshot and record.base_epoch != record.epoch:
            raise InvalidRecord("a snapshot must have base_epoch == epoch", path="$.base_epoch")
        if not record.snapshot and record.base_epoch >= record.epoch:
            raise InvalidRecord("a delta must have base_epoch < epoch", path="$.epoch")
    return body


def _path_of(exc: msgspec.ValidationError) -> str | None:
    text = str(exc)
    marker = " - at `"
    if marker in text:
        return text.rsplit(marker, 1)[1].rstrip("`")
    return None


def encode_record(record: Record) -> EncodedRecord:
    """Validate and encode; raises :class:`InvalidRecord` naming the field, appends nothing."""
    scope = _SCOPES.get(type(record))
    if scope is not None:
        kind, field = scope
        return EncodedRecord(kind, getattr(record, field), _encode_checked(record))
    raise InvalidRecord(f"cannot journal a {type(record).__name__}", path="$")


_OPS = msgspec.msgpack.Decoder(list[OpRecord])


def _op_bounds() -> tuple[int, ...] | None:
    """The bounds of :class:`OpRecord`'s fields, read from its schema, for :func:`_plainly_valid`;
    None (no fast path) when the schema has a constraint that check does not know."""
    info = msgspec.inspect.type_info(OpRecord)
    assert isinstance(info, msgspec.inspect.StructType)
    types = {f.name: f.type for f in info.fields}
    ts = types["ts"]
    assert isinstance(ts, msgspec.inspect.StructType)
    types.update({f"ts.{f.name}": f.type for f in ts.fields})
    node = types["ts.node_id"]
    strs = [types[n] for n in ("map", "key", "op_id", "origin", "ts.node_id")]
    ints = [types[n] for n in ("ts.millis", "ts.counter")]
    value = types["value"]
    if (
        not all(isinstance(t, msgspec.inspect.StrType) for t in strs)
        or not all(isinstance(t, msgspec.inspect.IntType) for t in ints)
        or types["origin"] != node
        or not isinstance(value, msgspec.inspect.BytesType)
        or (value.min_length, value.max_length) != (None, None)
    ):
        return None
    out: list[int] = []
    for t in strs:
        assert isinstance(t, msgspec.inspect.StrType)
        if t.pattern not in (None, "^[^:]+$") or (t.pattern is not None and t != node):
            return None
        out += [t.min_length or 0, t.max_length if t.max_length is not None else 2**63]
    if not isinstance(node, msgspec.inspect.StrType) or node.pattern != "^[^:]+$":
        return None
    for t in ints:
        assert isinstance(t, msgspec.inspect.IntType)
        if (t.gt, t.lt, t.multiple_of) != (None, None, None) or t.ge is None or t.le is None:
            return None
        out += [t.ge, t.le]
    return tuple(out)


_BOUNDS = _op_bounds()


def _plainly_valid(r: OpRecord) -> bool:
    """True only for a record the strict decode would accept: every field of the right type
    within the bounds of the schema (``_op_bounds``). False says nothing: check it strictly."""
    return _all_plainly_valid([r])


def _all_plainly_valid(records: list[OpRecord]) -> bool:
    """:func:`_plainly_valid` of every record, in one loop (a client batch)."""
    if _BOUNDS is None:
        return False
    m0, m1, k0, k1, i0, i1, _, _, n0, n1, ms0, ms1, c0, c1 = _BOUNDS
    op_kind, timestamp = OpKind, Timestamp
    for r in records:
        ts = r.ts
        node = ts.node_id
        if not (
            type(r.map) is str
            and m0 <= len(r.map) <= m1
            and type(r.key) is str
            and k0 <= len(r.key) <= k1
            and type(r.op_id) is str
            and i0 <= len(r.op_id) <= i1
            and type(node) is str
            and n0 <= len(node) <= n1
            and ":" not in node
            and (
                r.origin == node
                or (type(r.origin) is str and n0 <= len(r.origin) <= n1 and ":" not in r.origin)
            )
            and type(r.op) is op_kind
            and type(r.value) is bytes
            and type(ts) is timestamp
            and type(ts.millis) is int
            and ms0 <= ts.millis <= ms1
            and type(ts.counter) is int
            and c0 <= ts.counter <= c1
        ):
            return False
    return True


def encode_op_records(records: list[OpRecord]) -> list[EncodedRecord]:
    """``encode_record`` for many op records (a hot path: every TopGun batch): records whose
    every field is plainly within the schema are encoded as they are; otherwise all are
    validated by one strict decode, and ``InvalidRecord`` names the record and field."""
    bodies = [_ENCODER.encode(r) for r in records]
    if not _all_plainly_valid(records):
        try:
            _OPS.decode(_ENCODER.encode(records))
        except msgspec.ValidationError as exc:
            raise InvalidRecord(str(exc), path=_path_of(exc)) from None
    return [EncodedRecord(KIND_OP, r.map, b) for r, b in zip(records, bodies, strict=True)]


class StreamCheckpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A stream's state as of journal seq ``through_seq``: the frames that rebuild it.

    ``frames`` is a snapshot followed by the diffs since (the state-plane streams need only the
    snapshot; WVP streams keep the diffs the hub cannot apply). Empty ``frames`` with an
    ``epoch`` means the state cannot be rebuilt (a WVP replay log that overflowed): the stream
    waits for its producer's next snapshot, as it did before the checkpoint.
    """

    stream: StreamId
    through_seq: Annotated[int, msgspec.Meta(ge=0)]
    epoch: Epoch | None
    frames: tuple[StreamFrame, ...] = ()


_CHECKPOINT_DECODER = msgspec.msgpack.Decoder(StreamCheckpoint)


def encode_checkpoint(checkpoint: StreamCheckpoint) -> bytes:
    return _ENCODER.encode(checkpoint)


def decode_checkpoint(body: bytes, *, stream: str) -> StreamCheckpoint:
    try:
        return _CHECKPOINT_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise JournalCorrupt(str(exc), path=f"checkpoint {stream!r}") from None


def decode_record(kind: str, body: bytes, *, seq: int) -> Record:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise JournalCorrupt(f"unknown record kind {kind!r}", path=f"seq {seq}")
    try:
        record: Record = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise JournalCorrupt(str(exc), path=f"seq {seq}") from None
    return record
