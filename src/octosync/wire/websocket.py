"""Server-to-client WebSocket framing (RFC 6455 §5.2), applied once per encoded frame, and
permessage-deflate (RFC 7692) compressed once per fan-out message.

The hub fans out the same bytes object to every caught-up subscriber; framing it once, before
it is shared, means the flusher writes it to each socket as it is. Compression follows the same
rule: the server always answers a deflate offer with ``server_no_context_takeover``, so each
compressed message stands alone and one compressed frame is valid on every connection that
negotiated the extension (a per-connection context would mean compressing per subscriber).
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Final

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")

OP_TEXT = 0x1
OP_BINARY = 0x2
_FIN = 0x80
_RSV1 = 0x40
"""Set on the first frame of a compressed message (RFC 7692 §6)."""


def _header(first: int, n: int) -> bytes:
    if n < 126:
        return bytes((first, n))
    if n < 1 << 16:
        return bytes((first, 126)) + _U16.pack(n)
    return bytes((first, 127)) + _U64.pack(n)


def ws_frame(payload: bytes, *, text: bool) -> bytes:
    """A final, unmasked server-to-client WebSocket frame."""
    return ws_frame_header(len(payload), text=text) + payload


def ws_frame_header(n: int, *, text: bool) -> bytes:
    """The header of :func:`ws_frame` for an ``n``-byte payload (to write it before the
    payload, when copying a large payload behind its header costs more than a second write)."""
    return _header(_FIN | (OP_TEXT if text else OP_BINARY), n)


# -- permessage-deflate --------------------------------------------------------------------

DEFLATE_ANSWER: Final = "permessage-deflate; server_no_context_takeover"
"""What the server accepts a deflate offer as: its own messages independent of each other (the
client keeps its context, which costs the server nothing to follow)."""

DEFLATE_MIN_BYTES: Final = 1024
"""Messages shorter than this go out uncompressed (a per-message choice in RFC 7692): acks and
single events gain a few bytes at the cost of a zlib call each."""

_TAIL: Final = b"\x00\x00\xff\xff"
_PARAM = re.compile(r"^([a-z_]+)(?:=\"?([0-9]+)\"?)?$")
_KNOWN = frozenset(
    {
        "server_no_context_takeover",
        "client_no_context_takeover",
        "server_max_window_bits",
        "client_max_window_bits",
    }
)


def accepts_deflate(offers: str | None) -> bool:
    """Whether a ``Sec-WebSocket-Extensions`` request header holds a permessage-deflate offer
    the server can take as :data:`DEFLATE_ANSWER`: known parameters only, each at most once,
    and no ``server_max_window_bits`` below zlib's 15 (the shared compressor uses 15; a client
    that needs a smaller window gets plain frames instead)."""
    if not offers:
        return False
    for offer in offers.split(","):
        name, *params = (part.strip() for part in offer.split(";"))
        if name.lower() == "permessage-deflate" and _takeable(params):
            return True
    return False


def _takeable(params: list[str]) -> bool:
    seen: set[str] = set()
    for param in params:
        match = _PARAM.match(param.lower())
        if match is None or match[1] not in _KNOWN or match[1] in seen:
            return False
        name, bits = match[1], match[2]
        seen.add(name)
        if name == "server_max_window_bits" and (bits is None or int(bits) != 15):
            return False
        if name == "client_max_window_bits" and bits is not None and not 8 <= int(bits) <= 15:
            return False
        if name.endswith("takeover") and bits is not None:
            return False
    return True


class FrameDeflater:
    """Compressed binary frames, each message on its own (``Z_FULL_FLUSH`` clears the history
    between messages), so the same bytes serve every connection that negotiated deflate.
    Owned by one event loop: a zlib stream is not shared across threads."""

    def __init__(self, level: int = 1) -> None:
        self._z = zlib.compressobj(level, zlib.DEFLATED, -15)

    def frame(self, payload: bytes, *, text: bool = False) -> bytes:
        body = self._z.compress(payload) + self._z.flush(zlib.Z_FULL_FLUSH)
        assert body.endswith(_TAIL)
        body = body[: -len(_TAIL)]
        first = _FIN | _RSV1 | (OP_TEXT if text else OP_BINARY)
        return _header(first, len(body)) + body
