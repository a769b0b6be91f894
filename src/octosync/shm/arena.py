"""The shared-blob arena: payloads behind a 40-byte header in one flat buffer, sans-I/O.

Layout (lazily-spec ``arena_blob.json``; byte-compatible with lazily-rs, lazily-py and
lazily-zig), all little-endian, at each descriptor's ``offset``::

    magic u32 = 0x4C5A5348 ("HSZL" in memory) | version u16 = 1 | header_len u16 = 40
    generation u64 | epoch u64 | length u64 | checksum u64 (FNV-1a 64 of the payload)
    payload (length bytes)

Writes append with wrap-around; every write takes the next generation, so a descriptor whose
region was overwritten since no longer matches its header (``BlobInvalid`` on ``generation``)
instead of returning someone else's bytes. ``read_blob`` checks bounds, the header, every
descriptor field and the checksum before it returns a view: a descriptor is never accepted
unchecked. The buffer may be a ``bytearray`` or POSIX shared memory (``shm.region``).
"""

from __future__ import annotations

import struct

from octosync.errors import BlobInvalid, LimitExceeded
from octosync.ipc.messages import BlobRef
from octosync.shm.fnv import fnv1a_64

MAGIC = 0x4C5A5348
VERSION = 1
HEADER = struct.Struct("<IHHQQQQ")
HEADER_LEN = HEADER.size
U64_MAX = 2**64 - 1


class BlobArena:
    """Writer and validating reader over ``buffer`` (whose lifetime the caller owns)."""

    __slots__ = ("_buf", "next_generation", "write_offset")

    def __init__(self, buffer: bytearray | memoryview, *, next_generation: int = 1) -> None:
        if len(buffer) <= HEADER_LEN:
            raise LimitExceeded(f"an arena needs more than {HEADER_LEN} bytes", path="capacity")
        self._buf = memoryview(buffer).cast("B")
        self.write_offset = 0
        self.next_generation = next_generation

    @property
    def capacity(self) -> int:
        return len(self._buf)

    @property
    def max_blob_len(self) -> int:
        return self.capacity - HEADER_LEN

    def write_blob(self, epoch: int, payload: bytes | bytearray | memoryview) -> BlobRef:
        """Copy ``payload`` in (after its header) and return its descriptor."""
        length = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
        if length > self.max_blob_len:
            raise LimitExceeded(
                f"a blob of {length} bytes exceeds this arena's {self.max_blob_len}", path="len"
            )
        if self.next_generation >= U64_MAX:
            raise LimitExceeded("the arena's generation counter is exhausted", path="generation")
        if self.write_offset + HEADER_LEN + length > self.capacity:
            self.write_offset = 0
        offset = self.write_offset
        generation = self.next_generation
        self.next_generation += 1
        checksum = fnv1a_64(payload)
        start = offset + HEADER_LEN
        self._buf[start : start + length] = payload
        # the header last: a reader racing this write sees the old generation or the new one
        HEADER.pack_into(
            self._buf, offset, MAGIC, VERSION, HEADER_LEN, generation, epoch, length, checksum
        )
        self.write_offset = start + length
        if self.write_offset == self.capacity:
            self.write_offset = 0
        return BlobRef(offset, length, generation, epoch, checksum)

    def read_blob(self, ref: BlobRef) -> memoryview:
        """A read-only view of the payload ``ref`` names, after checking everything."""
        if ref.backend != "shm":
            raise BlobInvalid(f"backend {ref.backend!r} is not shared memory", path="backend")
        end = ref.offset + HEADER_LEN + ref.len
        if end > self.capacity:
            raise BlobInvalid(
                f"blob at {ref.offset} of {ref.len} bytes ends past the arena's "
                f"{self.capacity} bytes",
                path="offset",
            )
        magic, version, header_len, generation, epoch, length, checksum = HEADER.unpack_from(
            self._buf, ref.offset
        )
        for field, got, want in (
            ("magic", magic, MAGIC),
            ("version", version, VERSION),
            ("header_len", header_len, HEADER_LEN),
            ("generation", generation, ref.generation),
            ("epoch", epoch, ref.epoch),
            ("len", length, ref.len),
            ("checksum", checksum, ref.checksum),
        ):
            if got != want:
                raise BlobInvalid(
                    f"the arena header has {field} {got}, the descriptor {want}"
                    + (" (the region was reused)" if field == "generation" else ""),
                    path=field,
                )
        start = ref.offset + HEADER_LEN
        view = self._buf[start : start + ref.len]
        actual = fnv1a_64(view)
        if actual != ref.checksum:
            raise BlobInvalid(
                f"payload checksum {actual:#x} does not match {ref.checksum:#x}", path="checksum"
            )
        return view.toreadonly()

    def header_bytes(self, ref: BlobRef) -> bytes:
        return bytes(self._buf[ref.offset : ref.offset + HEADER_LEN])

    def release(self) -> None:
        """Drop this arena's view of the buffer (so shared memory can be closed)."""
        self._buf.release()
