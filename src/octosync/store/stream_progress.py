"""How far each continuous reader of the journal has read and committed, so a trim never
removes a record one of them has still to read.

``octosync pipeline stream`` registers itself in ``DATA/stream-progress/ID.json`` (its
checkpoint and ``committed_seq``: every record up to that seq is read and committed in the
checkpoint) when it starts and again before each micro-batch, from what its checkpoint's
commit log says. The journal's trim keeps every record after the lowest ``committed_seq`` of
the registered readers: a stream that is down (killed, or waiting for a restart) holds its place,
so it resumes where it stopped instead of failing on a trimmed range. Removing a reader's file
releases what it held (a stream that will not be restarted).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

import msgspec

SUBDIR: Final = "stream-progress"


class StreamProgress(msgspec.Struct, frozen=True):
    checkpoint: str
    committed_seq: int


def progress_dir(data_dir: Path) -> Path:
    return Path(data_dir) / SUBDIR


def record(data_dir: Path, reader: str, checkpoint: str, committed_seq: int) -> None:
    """Write ``reader``'s progress (atomically: a trim reads either the old file or the new)."""
    root = progress_dir(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{reader}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(msgspec.json.encode(StreamProgress(checkpoint, committed_seq)))
    os.replace(tmp, path)


def readers(data_dir: Path) -> dict[str, StreamProgress | None]:
    """Every registered reader's progress; None for a file that cannot be read as one (it
    holds the whole journal: a trim never guesses)."""
    root = progress_dir(data_dir)
    found: dict[str, StreamProgress | None] = {}
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        progress = None
        with contextlib.suppress(OSError, msgspec.DecodeError):
            progress = msgspec.json.decode(path.read_bytes(), type=StreamProgress)
        found[path.stem] = progress
    return found


def lowest_committed(data_dir: Path) -> int | None:
    """The lowest ``committed_seq`` of the registered readers (0 for an unreadable file), or
    None when no reader is registered."""
    held = readers(data_dir)
    if not held:
        return None
    return min(0 if p is None else max(0, p.committed_seq) for p in held.values())
