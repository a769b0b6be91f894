"""lazily-spec's MsgPack dialect: the externally tagged form as MessagePack named maps.

Maps are keyed by the JSON field names (``rmp_serde::to_vec_named``), so the optional ``key``
is omitted exactly as in JSON. Byte strings are written as arrays of u8, as serde writes a
``Vec<u8>`` (what the lazily-spec fixtures carry); a MessagePack ``bin`` is accepted as well.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from octosync.ipc.messages import Handshake, IpcMessage
from octosync.wire.strict import Buffer, strict
from octosync.wire.tagged import WEnvelope, from_wire, to_wire

DIALECT = "msgpack"

U8 = Annotated[int, msgspec.Meta(ge=0, le=255)]

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[WEnvelope[Any]] = msgspec.msgpack.Decoder(
    WEnvelope[bytes | tuple[U8, ...]]
)
_handshake_decoder = msgspec.msgpack.Decoder(Handshake)


def encode(message: IpcMessage) -> bytes:
    return _encoder.encode(to_wire(message))


def decode(data: Buffer) -> IpcMessage:
    return from_wire(strict(_decoder.decode, data, dialect=DIALECT), DIALECT)


def encode_handshake(handshake: Handshake) -> bytes:
    return _encoder.encode(handshake)


def decode_handshake(data: Buffer) -> Handshake:
    return strict(_handshake_decoder.decode, data, dialect=DIALECT)
