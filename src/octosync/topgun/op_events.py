"""The ``SERVER_EVENT`` payloads of applied ops, as subscribers of a map receive them."""

from __future__ import annotations

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import NIL, WireLWWRecord, WireTimestamp
from octosync.wire import topgun as tg

_PUT = OpKind.PUT
_NIL = bytes(NIL)


def op_event(op: tg.ClientOp, rec: OpRecord) -> tg.ServerEventPayload:
    """The ``SERVER_EVENT`` payload of an applied op; a REMOVE carries ``record`` with a null
    value, because the real client applies LWW events only when ``record`` is present."""
    if rec.op is OpKind.OR_ADD:
        return tg.ServerEventPayload(op.map_name, "OR_ADD", op.key, or_record=op.or_record)
    if rec.op is OpKind.OR_REMOVE:
        return tg.ServerEventPayload(op.map_name, "OR_REMOVE", op.key, or_tag=op.or_tag)
    if op.record is not None and rec.op is _PUT:  # the usual op, first
        return tg.ServerEventPayload(op.map_name, "PUT", op.key, record=op.record)
    if op.record is not None and bytes(op.record.value) == _NIL:
        return tg.ServerEventPayload(op.map_name, rec.op.value, op.key, record=op.record)
    value = NIL if rec.op is OpKind.REMOVE else msgspec.Raw(rec.value)
    record = WireLWWRecord(value, WireTimestamp.of(rec.ts))
    return tg.ServerEventPayload(op.map_name, rec.op.value, op.key, record=record)


def record_events(rec: OpRecord) -> list[tg.ServerEventPayload]:
    """The ``SERVER_EVENT`` payloads of an op record that changed a map (one per tag an OR
    remove lists), for records that came without the client's op (other nodes, repairs)."""
    stamp = WireTimestamp.of(rec.ts)
    if rec.op is OpKind.OR_ADD:
        or_rec = tg.WireORRecord(msgspec.Raw(rec.value), stamp, rec.op_id)
        return [tg.ServerEventPayload(rec.map, "OR_ADD", rec.key, or_record=or_rec)]
    if rec.op is OpKind.OR_REMOVE:
        tags: list[str] = msgspec.msgpack.decode(rec.value, type=list[str])
        return [tg.ServerEventPayload(rec.map, "OR_REMOVE", rec.key, or_tag=t) for t in tags]
    if rec.op is OpKind.INC:
        return []
    value = NIL if rec.op is OpKind.REMOVE else msgspec.Raw(rec.value)
    record = WireLWWRecord(value, stamp)
    return [tg.ServerEventPayload(rec.map, rec.op.value, rec.key, record=record)]
