"""Real storage faults for tests: an immutable file (``chattr +i``) and a small full disk (tmpfs).

Both need root (``.ci/run`` runs as root); without the rights a test skips with one line
(``tests.conftest.missing``: a failure under ``OCTOSYNC_REQUIRE_PEERS=1``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import missing, require_tool


def _run(*command: str) -> bool:
    done = subprocess.run(command, capture_output=True, check=False)
    return done.returncode == 0


def need_root() -> None:
    if os.geteuid() != 0:
        missing("storage fault tests need root (CI runs them as root)")
    require_tool("chattr", "storage fault tests make files immutable")


def set_immutable(paths: list[Path], on: bool) -> None:
    """``chattr +i`` (or ``-i``) on each existing file: writes to it fail with EPERM."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not _run("chattr", "+i" if on else "-i", *existing):
        missing("chattr is not supported on this file system")


def journal_files(data: Path) -> list[Path]:
    return [data / f"journal.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]


@contextlib.contextmanager
def small_disk(where: Path, megabytes: int) -> Iterator[Path]:
    """A tmpfs of ``megabytes`` mounted at ``where`` for the test, unmounted after."""
    need_root()
    where.mkdir(parents=True, exist_ok=True)
    if not _run("mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)):
        missing("cannot mount a tmpfs here (CI runs the full-disk tests as root)")
    try:
        yield where
    finally:
        # chattr flags do not exist on tmpfs; a busy mount is detached lazily
        if not _run("umount", str(where)):
            _run("umount", "-l", str(where))


def fill(disk: Path) -> Path:
    """Write a filler file until the disk has no free block left; delete it to free the disk."""
    filler = disk / "filler"
    chunk = b"\0" * (64 * 1024)
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError:
                break
        with contextlib.suppress(OSError):
            while f.write(b"\0"):
                pass
    return filler
