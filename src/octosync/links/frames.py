"""The sockets of a chain connection: frames (``wire.chain_link``) read from a stream.

``read_payload``/``read_frame``/``FrameReader`` are the only socket code for chain frames.
"""

from __future__ import annotations

import asyncio

from octosync.errors import Oversize
from octosync.wire.chain_link import MAX_FRAME, AnyFrame, decode
from octosync.wire.framing import HEADER, HEADER_SIZE, FrameDecoder


async def read_payload(reader: asyncio.StreamReader) -> bytes:
    """The next frame's encoded payload (``decode`` reads it); ``IncompleteReadError`` at end."""
    header = await reader.readexactly(HEADER_SIZE)
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise Oversize(f"frame of {size} bytes is above {MAX_FRAME}", path="length")
    return await reader.readexactly(size)


READ_SIZE = 256 * 1024


class FrameReader:
    """Payloads from a stream in bulk: one read takes every frame the kernel holds, so a busy
    connection costs one wake-up per burst rather than two awaited reads per frame (split by
    ``wire.framing.FrameDecoder``, the server's u32 framing)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.decoder = FrameDecoder(MAX_FRAME)

    async def payloads(self) -> list[bytes]:
        """At least one payload; ``IncompleteReadError`` at end of stream (even mid-frame)."""
        while True:
            chunk = await self.reader.read(READ_SIZE)
            if not chunk:
                raise asyncio.IncompleteReadError(self.decoder.held, None)
            found = self.decoder.feed(chunk)
            if found:
                return found


async def read_frame(reader: asyncio.StreamReader) -> AnyFrame:
    """The next frame; ``IncompleteReadError`` at end of stream, typed errors for bad input."""
    return decode(await read_payload(reader))
