"""Where a job's ``--journal DIR`` points, and reading its Parquet with a fixed schema.

``DIR`` may be a data directory holding ``journal.sqlite3`` (what ``octosync serve`` writes):
it is first exported incrementally to ``DIR/export`` (only new records are written), so a job
always sees every committed record. ``DIR`` may also be an export (with ``ops/`` and
``frames/``) or a bare ops dataset (what the benchmark generates).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from octosync.errors import ConfigError, PipelineError
from octosync.pipeline.layout import EXPORT_SUBDIR
from octosync.store.export import FRAMES_DIR, FRAMES_SCHEMA, OPS_DIR, WATERMARK_FILE, export
from octosync.store.journal import Journal, journal_path
from octosync.store.op_table import OPS_SCHEMA


def is_export(path: Path) -> bool:
    """``path`` is an export (it has a watermark or any dataset's directory), not a bare ops
    dataset (an export may hold only some datasets: a journal of shared documents only)."""
    from octosync.store.datasets import DATASETS

    path = Path(path)
    return (path / WATERMARK_FILE).exists() or any((path / d.name).is_dir() for d in DATASETS)


def check_input(journal_dir: Path) -> None:
    """Refuse, before Spark starts, a ``--journal`` folder holding neither a journal, nor an
    export, nor any Parquet (a job over it would report nothing and look successful)."""
    journal_dir = Path(journal_dir)
    if journal_path(journal_dir).exists() or is_export(journal_dir):
        return
    if next(journal_dir.rglob("*.parquet"), None) is None:
        raise ConfigError(
            f"{journal_dir} holds no journal (journal.sqlite3), export (ops/, frames/) or "
            "Parquet dataset: point --journal at the folder octosync serve --data writes "
            "(./var by default)",
            path="--journal",
        )


def resolve_export(journal_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """The export directory for ``journal_dir``, bringing it up to date when it is a journal;
    absolute, since a Spark Connect server resolves paths from its own working directory."""
    journal_dir = Path(journal_dir).resolve()
    if journal_path(journal_dir).exists():
        out = journal_dir / EXPORT_SUBDIR
        with Journal(journal_dir, readonly=True) as journal:
            result = export(journal, out)
        if progress is not None:
            progress(f"exported {result.records} new journal records to {out}")
        return out
    if journal_dir.is_dir():
        return journal_dir
    raise PipelineError("no journal, export or Parquet dataset here", path=str(journal_dir))


def _spark_schema(arrow_schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def _read(spark: Any, path: Path, arrow_schema: Any) -> Any:
    names = arrow_schema.names
    if not path.exists() or not any(path.rglob("*.parquet")):
        return spark.createDataFrame([], _spark_schema(arrow_schema))
    return (
        spark.read.schema(_spark_schema(arrow_schema))
        .option("recursiveFileLookup", "true")
        .parquet(str(path))
        .select(*names)
    )


def read_ops(spark: Any, export_dir: Path) -> Any:
    """Op records (``OPS_SCHEMA``) from an export or a bare ops dataset."""
    sub = Path(export_dir) / OPS_DIR
    if is_export(export_dir):
        return _read(spark, sub, OPS_SCHEMA)
    return _read(spark, Path(export_dir), OPS_SCHEMA)


def ops_rows(export_dir: Path) -> int:
    """The op records :func:`read_ops` reads, from the Parquet files' footers (no Spark job)."""
    import pyarrow.parquet as pq

    sub = Path(export_dir) / OPS_DIR
    root = sub if is_export(export_dir) else Path(export_dir)
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(root.rglob("*.parquet")))


def read_frames(spark: Any, export_dir: Path) -> Any:
    """Stream frames (``FRAMES_SCHEMA``) from an export; empty when it has none."""
    return _read(spark, Path(export_dir) / FRAMES_DIR, FRAMES_SCHEMA)


def read_dataset(spark: Any, export_dir: Path, name: str) -> Any:
    """One of the export's activity datasets (``chain_events``, ``chain_states``,
    ``dataspace``, ``yjs_updates``: ``store.datasets``) from an export; empty when it has
    none."""
    from octosync.store.datasets import BY_NAME

    return _read(spark, Path(export_dir) / name, BY_NAME[name].schema)
