"""Signaling messages (``signaling.messages``) as JSON, one per WebSocket message, strictly."""

from __future__ import annotations

import msgspec

from octosync.errors import DecodeError, LimitExceeded
from octosync.signaling.messages import ClientSignal, ServerSignal

_client_decoder = msgspec.json.Decoder(ClientSignal)
_server_decoder = msgspec.json.Decoder(ServerSignal)
_encoder = msgspec.json.Encoder()


def decode_client(data: bytes) -> ClientSignal:
    """One client frame (a WebSocket text or binary message), strictly."""
    try:
        frame: ClientSignal = _client_decoder.decode(data)
        return frame
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(str(exc), path="$") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not valid UTF-8 ({exc.reason})", path="$") from None
    except RecursionError:
        raise LimitExceeded("the frame nests deeper than the decoder allows", path="$") from None


def encode_server(frame: ServerSignal) -> bytes:
    return _encoder.encode(frame)


def decode_server(data: bytes | str) -> ServerSignal:
    """One server frame, as the client reads it."""
    frame: ServerSignal = _server_decoder.decode(data)
    return frame


def encode_client(frame: ClientSignal) -> bytes:
    return _encoder.encode(frame)
