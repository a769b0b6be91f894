"""The lazily dialects as the server speaks them, chosen by the peer's first message.

- ``json``: the seed's dialect (``"type"`` tags, ``slot_id``, base64 payloads);
- ``json_tagged``: lazily-spec's externally tagged JSON (``{"Snapshot": {...}}``);
- ``msgpack``: the same shapes in MessagePack, binary frames.

The first message is the handshake. A JSON handshake names its codec (``json`` or
``json_tagged``); a MessagePack handshake means ``msgpack``. A producer whose handshake said
``json`` but whose first state-plane message is in the tagged shape is switched to
``json_tagged`` (lazily-spec peers send the same bare handshake). Errors are
``{"type": "error", "code": "<Name>", "message": ...}`` in the connection's own encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from octosync.errors import DecodeError, OctosyncError
from octosync.ipc.messages import (
    CrdtSync,
    Delta,
    Handshake,
    IpcMessage,
    RemoteOp,
    RemoteOpResult,
    ResyncRequest,
    Snapshot,
)
from octosync.wire import DIALECTS, Codec
from octosync.wire import json as wire_json
from octosync.wire.json_tagged import looks_tagged


class ErrorFrame(msgspec.Struct, frozen=True, tag_field="type", tag="error", omit_defaults=True):
    code: str
    message: str
    path: str | None = None


_json_errors = msgspec.json.Encoder()
_json_error_decoder = msgspec.json.Decoder(ErrorFrame)
_msgpack_errors = msgspec.msgpack.Encoder()


@dataclass(frozen=True)
class FaceDialect:
    """One wire dialect plus what a face needs around it (error frames, text or binary)."""

    name: str
    codec: Codec
    text: bool

    def decode_handshake(self, data: bytes) -> Handshake:
        return self.codec.decode_handshake(data)

    def encode_handshake(self, hs: Handshake) -> bytes:
        return self.codec.encode_handshake(hs)

    def decode(self, data: bytes) -> IpcMessage:
        return self.codec.decode(data)

    def encode(self, msg: object) -> bytes:
        if not isinstance(
            msg, Snapshot | Delta | ResyncRequest | CrdtSync | RemoteOp | RemoteOpResult
        ):
            raise TypeError(f"{type(msg).__name__} is not a state-plane message")
        return self.codec.encode(msg)

    def encode_error(self, err: OctosyncError) -> bytes:
        frame = ErrorFrame(code=err.name, message=err.message, path=err.path)
        return (_json_errors if self.text else _msgpack_errors).encode(frame)


DIALECT_SET: dict[str, FaceDialect] = {
    name: FaceDialect(name, codec, text=name != "msgpack") for name, codec in DIALECTS.items()
}
SEED_JSON = DIALECT_SET[wire_json.DIALECT]


def handshake_dialect(first: bytes) -> tuple[FaceDialect, Handshake]:
    """Decode the handshake (JSON or MessagePack) and pick the dialect its codec names."""
    is_json = first.lstrip()[:1] == b"{"
    hs = (SEED_JSON if is_json else DIALECT_SET["msgpack"]).decode_handshake(first)
    dialect = DIALECT_SET.get(hs.codec)
    if dialect is None or dialect.text != is_json:
        raise DecodeError(f"codec {hs.codec!r} is not spoken here in this encoding", path="codec")
    return dialect, hs


def sniff_producer_dialect(current: FaceDialect, first_message: bytes) -> FaceDialect:
    """A ``json`` producer whose first message is tagged speaks ``json_tagged``."""
    if current.name == wire_json.DIALECT and looks_tagged(first_message):
        return DIALECT_SET["json_tagged"]
    return current


def decode_error_frame(raw: bytes | str) -> ErrorFrame | None:
    """The server's JSON error frame, or None when ``raw`` is something else (a client's view)."""
    try:
        return _json_error_decoder.decode(raw)
    except msgspec.DecodeError:
        return None
