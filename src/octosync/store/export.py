"""Incremental export of committed journal records to a Parquet dataset (pyarrow).

Layout under ``DIR``::

    ops/hour=2026-01-01T00/part-00000000000000000001.parquet
    frames/hour=2026-01-01T00/part-00000000000000000001.parquet
    chain_events/ chain_states/ dataspace/ plane/   (the same layout; ``store.datasets``)
    _watermark.json                      {"seq": <last exported seq>}

Records are read in chunks of seqs after the watermark; each chunk is written as one file per
(kind, hour of ``recorded_ms``, UTC) named after the chunk's first seq, then the watermark moves
to the chunk's last seq. Every file is written under a dot-name, fsynced, and renamed into place
(readers such as Spark skip ``.`` and ``_`` names), so an interrupted export shows no half file.
Because a chunk always starts right after the watermark, re-running after an interruption
rewrites the same file names with a superset of their rows: the export is idempotent.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Final

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from octosync.errors import StorageError
from octosync.store.datasets import (
    BY_KIND,
    CHAIN_EVENTS_SCHEMA,
    CHAIN_STATES_SCHEMA,
    DATASPACE_SCHEMA,
    FRAMES_SCHEMA,
    Dataset,
    frame_row,
    record_batch,
)
from octosync.store.journal import Journal, RawRow
from octosync.store.op_table import OPS_SCHEMA

WATERMARK_FILE: Final = "_watermark.json"
OPS_DIR: Final = "ops"
FRAMES_DIR: Final = "frames"
CHAIN_EVENTS_DIR: Final = "chain_events"
CHAIN_STATES_DIR: Final = "chain_states"
DATASPACE_DIR: Final = "dataspace"
PLANE_DIR: Final = "plane"


class ExportResult(msgspec.Struct, frozen=True):
    first_seq: int
    last_seq: int
    records: int
    files: int


def read_watermark(out_dir: Path) -> int:
    path = Path(out_dir) / WATERMARK_FILE
    if not path.exists():
        return 0
    try:
        seq = json.loads(path.read_text())["seq"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"unreadable watermark: {exc}", path=str(path)) from exc
    if not isinstance(seq, int) or seq < 0:
        raise StorageError("watermark seq must be a non-negative integer", path=str(path))
    return seq


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` fills a hidden temporary beside ``path``; it is fsynced and renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _write_watermark(seq: int, path: Path) -> None:
    path.write_text(json.dumps({"seq": seq}))


def _hour(recorded_ms: int) -> str:
    return datetime.fromtimestamp(recorded_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H")


def _write_chunk(rows: list[RawRow], out_dir: Path) -> int:
    groups: dict[tuple[Dataset, str], list[RawRow]] = defaultdict(list)
    for row in rows:
        dataset = BY_KIND.get(row.kind)
        if dataset is not None:
            groups[(dataset, _hour(row.recorded_ms))].append(row)
    name = f"part-{rows[0].seq:020d}.parquet"
    for (dataset, hour), items in sorted(groups.items(), key=lambda g: (g[0][0].name, g[0][1])):
        table = pa.Table.from_batches([record_batch(dataset, items)], schema=dataset.schema)
        target = out_dir / dataset.name / f"hour={hour}" / name
        write_atomically(target, partial(pq.write_table, table))
    return len(groups)


def export(
    journal: Journal,
    out_dir: Path,
    *,
    chunk: int = 100_000,
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Export records after the watermark up to the journal's latest seq at the start."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = read_watermark(out_dir) + 1
    stop = journal.latest_seq()
    first, records, files = start, 0, 0
    while start <= stop:
        rows = journal.raw_rows(start, stop, limit=chunk)
        if not rows:
            break
        files += _write_chunk(rows, out_dir)
        last = rows[-1].seq
        write_atomically(out_dir / WATERMARK_FILE, partial(_write_watermark, last))
        records += len(rows)
        start = last + 1
        if progress is not None:
            progress(last, stop)
    return ExportResult(first, start - 1, records, files)


__all__ = [
    "CHAIN_EVENTS_SCHEMA",
    "CHAIN_STATES_SCHEMA",
    "DATASPACE_SCHEMA",
    "FRAMES_SCHEMA",
    "OPS_SCHEMA",
    "ExportResult",
    "export",
    "frame_row",
    "read_watermark",
]
