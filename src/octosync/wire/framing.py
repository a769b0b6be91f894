"""Length-prefixed framing for stream transports (TCP, pipes): u32 big-endian length + payload.

``FrameDecoder`` is sans-I/O: feed it whatever the socket returned, get back the complete frames.
A declared length above the limit is refused with ``Oversize`` as soon as its 4-byte header is
read, so a peer cannot make the receiver buffer a frame it would refuse anyway. After that the
stream has lost its framing, and the decoder refuses further input.
"""

from __future__ import annotations

import struct

from octosync.errors import DecodeError, LocalProtocolError, Oversize

HEADER = struct.Struct(">I")
HEADER_SIZE = HEADER.size
MAX_FRAME_SIZE = 2**32 - 1
"""The largest length a u32 prefix can declare."""

Buffer = bytes | bytearray | memoryview


def encode_frame(payload: Buffer, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """The framed bytes; ``Oversize`` if the payload is above the (negotiated) limit."""
    size = len(payload)
    if size > max_frame_size:
        raise Oversize(f"frame of {size} bytes is above the limit {max_frame_size}", path="length")
    return HEADER.pack(size) + bytes(payload)


class FrameDecoder:
    """Incremental decoder: ``feed(bytes) -> [frame, ...]``; ``close()`` at end of stream."""

    def __init__(self, max_frame_size: int) -> None:
        self._buffer = bytearray()
        self._failed: Oversize | None = None
        self.max_frame_size = max_frame_size

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, limit: int) -> None:
        """Tightened or relaxed after the handshake negotiates the session's limit."""
        if not 0 < limit <= MAX_FRAME_SIZE:
            raise LocalProtocolError(f"max_frame_size must be in 1..{MAX_FRAME_SIZE}, not {limit}")
        self._max_frame_size = limit

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (never more than header + limit)."""
        return len(self._buffer)

    @property
    def held(self) -> bytes:
        """A copy of the bytes held for an incomplete frame (what a stream ended inside)."""
        return bytes(self._buffer)

    def feed(self, data: Buffer) -> list[bytes]:
        if self._failed is not None:
            raise self._failed
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        start = 0
        end = len(buf)
        limit = self._max_frame_size
        while end - start >= HEADER_SIZE:
            (size,) = HEADER.unpack_from(buf, start)
            if size > limit:
                del buf[:]
                self._failed = Oversize(
                    f"peer declared a frame of {size} bytes; the limit is {limit}", path="length"
                )
                raise self._failed
            stop = start + HEADER_SIZE + size
            if stop > end:
                break
            frames.append(bytes(buf[start + HEADER_SIZE : stop]))
            start = stop
        if start:
            del buf[:start]
        return frames

    def close(self) -> None:
        """End of stream: ``DecodeError`` if it stopped inside a frame."""
        if self._buffer:
            held = len(self._buffer)
            self._buffer.clear()
            raise DecodeError(f"stream ended inside a frame ({held} bytes pending)", path="frame")
