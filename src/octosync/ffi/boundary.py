"""What the C ABI does, as Python over bytes: every entry point returns a status, never raises.

Frames on the IPC channel are u32 big-endian length-prefixed messages. ``frame_decode``
checks one frame, decodes its message (the spec's tagged JSON, or the seed's JSON) and
re-encodes it as canonical JSON (the tagged dialect, the bytes lazily-rs, lazily-py and
lazily-zig agree on); ``frame_encode`` does the reverse for a message in either JSON form.
A ``MirrorHandle`` is the opaque session handle: a state-plane ``Mirror`` fed message by
message, answering with a resync request when it loses sync.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from octosync.errors import OctosyncError
from octosync.ipc.messages import (
    CrdtSync,
    Delta,
    IpcMessage,
    OutboxAck,
    ResyncRequest,
    Snapshot,
)
from octosync.ipc.mirror import Mirror
from octosync.wire import json as seed_json
from octosync.wire import json_tagged

PREFIX = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class Status(IntEnum):
    OK = 0
    EMPTY = 1
    NULL_POINTER = 2
    INVALID_MESSAGE = 3
    ENCODE_FAILED = 4
    PANIC = 5


class Kind(IntEnum):
    UNKNOWN = 0
    SNAPSHOT = 1
    DELTA = 2
    CRDT_SYNC = 3
    RESYNC_REQUEST = 4
    OUTBOX_ACK = 5


_KINDS: dict[type, Kind] = {
    Snapshot: Kind.SNAPSHOT,
    Delta: Kind.DELTA,
    CrdtSync: Kind.CRDT_SYNC,
    ResyncRequest: Kind.RESYNC_REQUEST,
    OutboxAck: Kind.OUTBOX_ACK,
}

Result = tuple[Status, Kind, bytes]


def kind_of(message: IpcMessage) -> Kind:
    return _KINDS.get(type(message), Kind.UNKNOWN)


def _decode(data: bytes) -> IpcMessage:
    if json_tagged.looks_tagged(data):
        return json_tagged.decode(data)
    return seed_json.decode(data)


def _read(data: bytes) -> IpcMessage | Status:
    """The message in ``data``, or the status that says why there is none."""
    if not data:
        return Status.EMPTY
    try:
        return _decode(data)
    except OctosyncError:
        return Status.INVALID_MESSAGE


def canonical(data: bytes) -> Result:
    """A message (either JSON form) as canonical JSON, with its kind."""
    message = _read(data)
    if isinstance(message, Status):
        return message, Kind.UNKNOWN, b""
    kind = kind_of(message)
    try:
        return Status.OK, kind, json_tagged.encode(message)
    except (OctosyncError, TypeError, ValueError):
        return Status.ENCODE_FAILED, kind, b""


def frame_encode(message_json: bytes) -> Result:
    """The frame (length prefix and canonical JSON) of a message."""
    status, kind, body = canonical(message_json)
    if status is not Status.OK:
        return status, kind, b""
    return Status.OK, kind, PREFIX.pack(len(body)) + body


def frame_decode(frame: bytes) -> Result:
    """The canonical JSON of the message in one whole frame."""
    if not frame:
        return Status.EMPTY, Kind.UNKNOWN, b""
    if len(frame) < PREFIX.size:
        return Status.INVALID_MESSAGE, Kind.UNKNOWN, b""
    (length,) = PREFIX.unpack_from(frame)
    if length > MAX_FRAME or len(frame) != PREFIX.size + length:
        return Status.INVALID_MESSAGE, Kind.UNKNOWN, b""
    return canonical(frame[PREFIX.size :])


class MirrorHandle:
    """A session: apply messages (either JSON form) in order, get back what to send."""

    def __init__(self) -> None:
        self.mirror = Mirror()

    def apply(self, message_json: bytes) -> Result:
        """OK with an empty reply when applied or ignored; OK with a ResyncRequest's JSON
        when the mirror lost sync (a gap, a bad op, a wrong hash)."""
        message = _read(message_json)
        if isinstance(message, Status):
            return message, Kind.UNKNOWN, b""
        result = self.mirror.apply(message)
        if isinstance(result, ResyncRequest):
            return Status.OK, Kind.RESYNC_REQUEST, json_tagged.encode(result)
        return Status.OK, kind_of(message), b""

    @property
    def epoch(self) -> int | None:
        return self.mirror.last_epoch
