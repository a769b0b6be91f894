"""The lazily dialects as the server speaks them: first message picks the dialect.

``seed``: the seed's JSON (``"type"`` tags, ``slot_id``, base64 payloads) — the state-plane
Structs encode to it directly. Each dialect decodes a handshake, then IPC messages, strictly,
and encodes errors as ``{"type": "error", "code": "<Name>", "message": ...}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import msgspec

from octosync.errors import OctosyncError
from octosync.ipc.messages import Delta, Handshake, IpcMessage, ResyncRequest, Snapshot
from octosync.wire import json as wire_json


class Dialect(Protocol):
    @property
    def name(self) -> str: ...

    def decode_handshake(self, data: bytes) -> Handshake: ...

    def encode_handshake(self, hs: Handshake) -> bytes: ...

    def decode(self, data: bytes) -> IpcMessage: ...

    def encode(self, msg: object) -> bytes: ...

    def encode_error(self, err: OctosyncError) -> bytes: ...


class ErrorFrame(msgspec.Struct, frozen=True, tag_field="type", tag="error"):
    code: str
    message: str


_error_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class SeedJson:
    """The seed's JSON dialect, as implemented by ``octosync.wire.json``."""

    name: str = wire_json.DIALECT

    def decode_handshake(self, data: bytes) -> Handshake:
        return wire_json.decode_handshake(data)

    def encode_handshake(self, hs: Handshake) -> bytes:
        return wire_json.encode_handshake(hs)

    def decode(self, data: bytes) -> IpcMessage:
        return wire_json.decode(data)

    def encode(self, msg: object) -> bytes:
        assert isinstance(msg, Snapshot | Delta | ResyncRequest)
        return wire_json.encode(msg)

    def encode_error(self, err: OctosyncError) -> bytes:
        return _error_encoder.encode(ErrorFrame(code=err.name, message=str(err)))


SEED_JSON = SeedJson()


def pick_dialect(first: bytes) -> Dialect:
    """The dialect of a connection, from its first message."""
    return SEED_JSON
