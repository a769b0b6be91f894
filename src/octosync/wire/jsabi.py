"""JS-ABI v1 packets: ``MAGIC "JIT!" | VERSION u16 | FLAGS u16 | LENGTH u32 | PAYLOAD | CHECKSUM``.

All integers big-endian; CHECKSUM is BLAKE3-256 over the 12-byte header and the payload.
``PacketDecoder`` is sans-I/O and incremental: feed it bytes as they arrive, it returns the
payloads of the complete packets. A length above the limit is refused as soon as the header is
in, before any of the payload is buffered. After an error the framing is lost and the decoder
refuses further input.
"""

from __future__ import annotations

import struct

import blake3

from octosync.errors import DecodeError, Oversize

MAGIC = b"JIT!"
VERSION = 1
FLAGS = 0
MAX_PAYLOAD = 8 * 1024 * 1024
HEADER = struct.Struct(">4sHHI")
HEADER_SIZE = HEADER.size
CHECKSUM_SIZE = 32


def _checksum(header: bytes, payload: bytes | memoryview) -> bytes:
    h = blake3.blake3(header)
    h.update(payload)
    return h.digest()


def encode_packet(payload: bytes, *, max_payload: int = MAX_PAYLOAD) -> bytes:
    """One packet around ``payload`` (canonical CBOR, by convention)."""
    if len(payload) > max_payload:
        raise Oversize(f"payload of {len(payload)} bytes exceeds {max_payload}", path="length")
    header = HEADER.pack(MAGIC, VERSION, FLAGS, len(payload))
    return header + payload + _checksum(header, payload)


def check_header(header: bytes, *, max_payload: int = MAX_PAYLOAD) -> int:
    """Validate a 12-byte header; returns the payload length."""
    magic, version, flags, length = HEADER.unpack(header)
    if magic != MAGIC:
        raise DecodeError(f"bad magic {magic!r}, expected {MAGIC!r}", path="magic")
    if version != VERSION:
        raise DecodeError(f"unsupported version {version}, expected {VERSION}", path="version")
    if flags != FLAGS:
        raise DecodeError(f"reserved flags must be 0, got {flags:#06x}", path="flags")
    if length > max_payload:
        raise Oversize(f"payload length {length} exceeds {max_payload}", path="length")
    return int(length)


def decode_packet(data: bytes, *, max_payload: int = MAX_PAYLOAD) -> bytes:
    """The payload of ``data``, which must be exactly one packet (one WebSocket message)."""
    if len(data) < HEADER_SIZE:
        raise DecodeError(f"packet of {len(data)} bytes is shorter than its header", path="$")
    length = check_header(data[:HEADER_SIZE], max_payload=max_payload)
    total = HEADER_SIZE + length + CHECKSUM_SIZE
    if len(data) != total:
        raise DecodeError(f"packet is {len(data)} bytes, header says {total}", path="length")
    payload = data[HEADER_SIZE : HEADER_SIZE + length]
    if _checksum(data[:HEADER_SIZE], payload) != data[HEADER_SIZE + length :]:
        raise DecodeError("BLAKE3 checksum mismatch", path="checksum")
    return payload


class PacketDecoder:
    """Incremental decoder for a byte stream of packets."""

    def __init__(self, *, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()
        self._need: int | None = None  # payload length once the header was accepted
        self._broken = False

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        if self._broken:
            raise DecodeError("stream framing was lost after an earlier error", path="$")
        self._buf += data
        out: list[bytes] = []
        try:
            while True:
                if self._need is None:
                    if len(self._buf) < HEADER_SIZE:
                        break
                    self._need = check_header(
                        bytes(self._buf[:HEADER_SIZE]), max_payload=self.max_payload
                    )
                total = HEADER_SIZE + self._need + CHECKSUM_SIZE
                if len(self._buf) < total:
                    break
                out.append(decode_packet(bytes(self._buf[:total]), max_payload=self.max_payload))
                del self._buf[:total]
                self._need = None
        except (DecodeError, Oversize):
            self._broken = True
            self._buf.clear()
            raise
        return out
