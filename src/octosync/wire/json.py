"""The seed's JSON dialect: ``"type"``-tagged messages, ``slot_id``, base64 payloads.

The in-memory Structs already carry this dialect's field names, so msgspec encodes and decodes
them directly: no intermediate dicts, one pass each way.
"""

from __future__ import annotations

import msgspec

from octosync.errors import DecodeError
from octosync.ipc.messages import Handshake, IpcMessage
from octosync.wire.strict import Buffer, decode_error, strict, too_deep

DIALECT = "json"

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[IpcMessage] = msgspec.json.Decoder(IpcMessage)
_handshake_decoder = msgspec.json.Decoder(Handshake)


def encode(message: IpcMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> IpcMessage:
    """Strict decode: unknown fields, wrong types, ids above 2**53, trailing bytes refused."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _located(exc) from None
    except RecursionError:
        raise too_deep(DIALECT) from None


def encode_handshake(handshake: Handshake) -> bytes:
    return _encoder.encode(handshake)


def decode_handshake(data: Buffer) -> Handshake:
    return strict(_handshake_decoder.decode, data, dialect=DIALECT)


def _located(exc: msgspec.DecodeError | UnicodeDecodeError) -> DecodeError:
    err = decode_error(exc, dialect=DIALECT)
    # The only message-level check msgspec cannot place is Delta's epoch rule (a root
    # __post_init__); name the field it is about.
    if err.path == "$" and "must be above base_epoch" in err.message:
        return DecodeError(err.message, path="$.epoch")
    return err
