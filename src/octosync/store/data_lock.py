"""One server per data folder: an exclusive ``fcntl`` lock on ``DATA/octosync.lock`` (and one
process per chain link replica or device file, on ``<file>.lock`` beside it).

Two servers on one folder would append to one journal with their own idea of each stream's
epochs, and one's ``drop`` record would erase the other's stream at the next restart. The lock
is advisory but every octosync process that writes the journal as a server takes it, and the
kernel releases it when the holder dies (``kill -9`` included), so a stale file never blocks
a restart. The holder's pid is written into the file, for the refusal's message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final

from octosync.errors import DataDirInUse, StorageError

LOCK_FILE: Final = "octosync.lock"


class DataDirLock:
    """Held while the server runs; ``release`` (or process exit) lets the next one in."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the folder, or raise ``DataDirInUse`` naming it and the holder's pid."""
        return cls.hold(
            Path(data_dir) / LOCK_FILE,
            f"data folder {Path(data_dir).resolve()}",
            "another octosync serve?",
        )

    @classmethod
    def hold(cls, path: Path, what: str, guess: str) -> DataDirLock:
        """Take the lock file ``path`` for ``what``, or raise ``DataDirInUse`` naming ``what``,
        the holder's pid and ``guess`` (who that probably is)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot open the lock file: {os.strerror(exc.errno or 0)}", path=str(path)
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise DataDirInUse(
                f"{what} is in use by {who} ({guess}); stop it or choose another --data",
                path="--data",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
