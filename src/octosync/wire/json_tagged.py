"""lazily-spec's JSON dialect: externally tagged, ``node`` ids, u8-array payloads.

See ``octosync.wire.tagged`` for the shape and octosync's extensions. The handshake is the same
bare object as in the seed dialect.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from octosync.ipc.messages import Handshake, IpcMessage
from octosync.wire import json as seed_json
from octosync.wire.strict import Buffer, strict
from octosync.wire.tagged import ENVELOPE_TAGS, WEnvelope, from_wire, to_wire

DIALECT = "json_tagged"

U8 = Annotated[int, msgspec.Meta(ge=0, le=255)]

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[WEnvelope[Any]] = msgspec.json.Decoder(WEnvelope[tuple[U8, ...]])


def encode(message: IpcMessage) -> bytes:
    return _encoder.encode(to_wire(message))


def decode(data: Buffer) -> IpcMessage:
    return from_wire(strict(_decoder.decode, data, dialect=DIALECT), DIALECT)


def looks_tagged(data: Buffer) -> bool:
    """Whether a JSON frame is in this dialect rather than the seed's (no ``"type"`` tag):
    a cheap sniff for faces that accept both on one endpoint."""
    head = bytes(data[:64]).lstrip()
    return head.startswith(b"{") and head[1:].lstrip().startswith(_TAGS)


_TAGS = tuple(f'"{name}"'.encode() for name in ENVELOPE_TAGS)
"""Every message's opening key (``{"Snapshot": ...}``), from the envelope's fields."""


encode_handshake = seed_json.encode_handshake


def decode_handshake(data: Buffer) -> Handshake:
    return seed_json.decode_handshake(data)
