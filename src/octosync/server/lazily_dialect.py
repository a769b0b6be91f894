"""The lazily dialects as the server speaks them: first message picks the dialect.

``seed``: the seed's JSON (``"type"`` tags, ``slot_id``, base64 payloads) — the state-plane
Structs encode to it directly. Each dialect decodes a handshake, then IPC messages, strictly,
and encodes errors as ``{"type": "error", "code": "<Name>", "message": ...}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import msgspec

from octosync.errors import DecodeError, OctosyncError
from octosync.ipc.messages import Handshake, IpcMessage


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


def located(exc: msgspec.DecodeError | msgspec.ValidationError) -> DecodeError:
    """msgspec reports ``... - at `$.ops[0].slot_id```; keep that path as the error's path."""
    text = str(exc)
    msg, sep, where = text.rpartition(" - at `")
    if sep:
        return DecodeError(msg, path=where.rstrip("`"))
    return DecodeError(text, path="$")


_json_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class SeedJson:
    name: str = "json"

    def decode_handshake(self, data: bytes) -> Handshake:
        try:
            return _hs_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise located(exc) from exc

    def encode_handshake(self, hs: Handshake) -> bytes:
        return _json_encoder.encode(hs)

    def decode(self, data: bytes) -> IpcMessage:
        try:
            msg: IpcMessage = _ipc_decoder.decode(data)
            return msg
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise located(exc) from exc

    def encode(self, msg: object) -> bytes:
        return _json_encoder.encode(msg)

    def encode_error(self, err: OctosyncError) -> bytes:
        return _json_encoder.encode(ErrorFrame(code=err.name, message=str(err)))


_hs_decoder = msgspec.json.Decoder(Handshake)
_ipc_decoder = msgspec.json.Decoder(IpcMessage)

SEED_JSON = SeedJson()


def pick_dialect(first: bytes) -> Dialect:
    """The dialect of a connection, from its first message."""
    return SEED_JSON
