"""Transport framings applied once per encoded frame, so the framed bytes are shared too."""

from __future__ import annotations

import struct

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

OP_TEXT = 0x1
OP_BINARY = 0x2


def ws_frame(payload: bytes, *, text: bool) -> bytes:
    """A final, unmasked server-to-client WebSocket frame (RFC 6455 §5.2)."""
    first = 0x80 | (OP_TEXT if text else OP_BINARY)
    n = len(payload)
    if n < 126:
        header = bytes((first, n))
    elif n < 1 << 16:
        header = bytes((first, 126)) + _U16.pack(n)
    else:
        header = bytes((first, 127)) + _U64.pack(n)
    return header + payload


def u32_frame(payload: bytes) -> bytes:
    """A u32 big-endian length prefix, for the plain TCP face."""
    return _U32.pack(len(payload)) + payload
