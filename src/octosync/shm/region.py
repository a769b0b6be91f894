"""A named POSIX shared-memory region holding a ``BlobArena`` (``multiprocessing.shared_memory``).

The creator owns the region: it writes blobs and unlinks the name when done (a region left
by a process that died is replaced on the next ``create``). Other processes ``open`` it by
name and read descriptors in place. The region's name travels in the lazily handshake as the
feature ``shm-region:<name>``, next to ``shared-blob``.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from multiprocessing import resource_tracker, shared_memory
from types import TracebackType

from octosync.errors import BlobInvalid, LimitExceeded
from octosync.ipc.messages import BlobRef
from octosync.shm.arena import HEADER_LEN, BlobArena

REGION_FEATURE = "shm-region:"
SHARED_BLOB = "shared-blob"


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_created: set[str] = set()
"""Regions this process made (the resource tracker already follows them)."""


def fresh_name(prefix: str = "octosync") -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


class SharedRegion:
    """One mapping of a named region; ``arena`` reads and (for the creator) writes blobs."""

    def __init__(self, shm: shared_memory.SharedMemory, *, owner: bool) -> None:
        self._shm = shm
        self.owner = owner
        buf = shm.buf
        assert buf is not None
        self.arena = BlobArena(buf)

    @classmethod
    def create(cls, name: str, capacity: int) -> SharedRegion:
        if capacity <= HEADER_LEN:
            raise LimitExceeded(f"a region needs more than {HEADER_LEN} bytes", path="capacity")
        try:
            shm = shared_memory.SharedMemory(name=name, create=True, size=capacity)
        except FileExistsError:
            stale = shared_memory.SharedMemory(name=name)
            stale.close()
            stale.unlink()
            shm = shared_memory.SharedMemory(name=name, create=True, size=capacity)
        _created.add(shm.name)
        return cls(shm, owner=True)

    @classmethod
    def open(cls, name: str) -> SharedRegion:
        """Map an existing region (``BlobInvalid`` if there is none by that name, or if the
        name is not a plain region name: no paths, 1 to 200 of ``[A-Za-z0-9._-]``)."""
        if not _NAME.fullmatch(name):
            raise BlobInvalid(f"{name!r} is not a shared-memory region name", path="region")
        try:
            shm = shared_memory.SharedMemory(name=name)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise BlobInvalid(f"no shared-memory region {name!r}: {exc}", path="region") from exc
        # Only the creator unlinks: keep Python's tracker from removing a peer's region when
        # this process exits (it registers every mapping it opens).
        if shm.name not in _created:
            with contextlib.suppress(Exception):
                resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
        return cls(shm, owner=False)

    @property
    def name(self) -> str:
        return self._shm.name

    def write(self, epoch: int, payload: bytes | bytearray | memoryview) -> BlobRef:
        return self.arena.write_blob(epoch, payload)

    def read(self, ref: BlobRef) -> bytes:
        """A checked copy of the payload (safe to keep after the region is reused)."""
        view = self.arena.read_blob(ref)
        try:
            return bytes(view)
        finally:
            view.release()

    def close(self) -> None:
        self.arena.release()
        with contextlib.suppress(BufferError, OSError):
            self._shm.close()
        if self.owner:
            _created.discard(self._shm.name)
            with contextlib.suppress(FileNotFoundError):
                self._shm.unlink()

    def __enter__(self) -> SharedRegion:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
