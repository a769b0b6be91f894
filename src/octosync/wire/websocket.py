"""Server-to-client WebSocket framing (RFC 6455 §5.2), applied once per encoded frame.

The hub fans out the same bytes object to every caught-up subscriber; framing it once, before
it is shared, means the flusher writes it to each socket as it is.
"""

from __future__ import annotations

import struct

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")

OP_TEXT = 0x1
OP_BINARY = 0x2


def ws_frame(payload: bytes, *, text: bool) -> bytes:
    """A final, unmasked server-to-client WebSocket frame."""
    first = 0x80 | (OP_TEXT if text else OP_BINARY)
    n = len(payload)
    if n < 126:
        header = bytes((first, n))
    elif n < 1 << 16:
        header = bytes((first, 126)) + _U16.pack(n)
    else:
        header = bytes((first, 127)) + _U64.pack(n)
    return header + payload
