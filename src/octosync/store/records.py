"""What the journal holds: one tagged record kind per row, encoded once as MsgPack.

Every row has a ``kind`` and a ``scope`` (the map name for ops, the stream id for frames), so
reads by map or by stream use one index whatever the kind. A later kind (device events, state
changes) is a new Struct plus one entry in ``_KINDS``; the table does not change.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from octosync.crdt.op import OpRecord
from octosync.errors import InvalidRecord, JournalCorrupt
from octosync.hub.limits import MAX_EPOCH, MAX_STREAM_NAME

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


Record = OpRecord | StreamFrame | StreamDropped

KIND_OP: Final = "op"
KIND_FRAME: Final = "frame"
KIND_DROP: Final = "drop"
_KINDS: dict[str, type[OpRecord] | type[StreamFrame] | type[StreamDropped]] = {
    KIND_OP: OpRecord,
    KIND_FRAME: StreamFrame,
    KIND_DROP: StreamDropped,
}
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
    if isinstance(record, OpRecord):
        return EncodedRecord(KIND_OP, record.map, _encode_checked(record))
    if isinstance(record, StreamFrame):
        return EncodedRecord(KIND_FRAME, record.stream, _encode_checked(record))
    if isinstance(record, StreamDropped):
        return EncodedRecord(KIND_DROP, record.stream, _encode_checked(record))
    raise InvalidRecord(f"cannot journal a {type(record).__name__}", path="$")


_OPS = msgspec.msgpack.Decoder(list[OpRecord])


def encode_op_records(records: list[OpRecord]) -> list[EncodedRecord]:
    """``encode_record`` for many op records: validated by one strict decode of them all
    (a hot path: every TopGun batch); ``InvalidRecord`` names the record and field."""
    bodies = [_ENCODER.encode(r) for r in records]
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
