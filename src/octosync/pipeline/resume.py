"""Restart an in-process ``crdt.MapStore`` from a Spark compaction plus the journal's tail.

``compact`` writes ``records/`` (names in ``pipeline.layout``): the op records that still
carry state (each LWW winner, every OR and counter op). Folding them gives exactly the
compacted state; folding the journal's records after ``as_of_seq`` on top continues where the
compaction stopped. Plain pyarrow and Python: no Spark needed to load.

The server restarts its TopGun maps the same way (:func:`restart_records`), and its journal
maintenance trims op records only below what the compaction covers (:func:`compacted_through`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from octosync.crdt.fold import MapStore
from octosync.crdt.op import OpRecord
from octosync.errors import PipelineError, StorageError
from octosync.pipeline.layout import META_FILE, RECORDS_DIR
from octosync.store.journal import Journal


def read_op_records(path: Path, *, batch_size: int = 65_536) -> Iterator[OpRecord]:
    """Op records from a Parquet dataset in the ops schema, a batch at a time (bounded memory)."""
    # Imported here: the server imports this module, and pyarrow.dataset brings pandas (about
    # 60 MB of RSS) into a process that reads a compaction only at start-up.
    import pyarrow.dataset as ds

    from octosync.store.op_table import RECORD_SCHEMA, iter_op_records

    dataset = ds.dataset(str(path), format="parquet")
    return iter_op_records(dataset.to_batches(columns=RECORD_SCHEMA.names, batch_size=batch_size))


def fold_dataset(path: Path, store: MapStore | None = None) -> MapStore:
    """Fold every op record of a Parquet dataset into ``store`` (a new one by default)."""
    store = MapStore() if store is None else store
    store.apply_all(read_op_records(path))
    return store


def compacted_through(compaction: Path) -> int:
    """The last journal seq a compaction folded (``as_of_seq``); 0 when there is none here."""
    meta = Path(compaction) / META_FILE
    if not meta.exists():
        return 0
    return _as_of(Path(compaction))


def _as_of(compaction: Path) -> int:
    try:
        return int(json.loads((compaction / META_FILE).read_text())["as_of_seq"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PipelineError(f"not a compaction: {exc}", path=str(compaction)) from exc


def restart_records(journal: Journal, compaction: Path | None) -> Iterator[OpRecord]:
    """Every op record a restart folds: the compaction's ``records/`` and the journal's op
    records after its ``as_of_seq`` when one exists, else the whole journal's. A journal whose
    op records were trimmed past what the compaction holds cannot be rebuilt: a
    ``StorageError`` names both seqs before anything is read."""
    as_of = 0 if compaction is None else compacted_through(compaction)
    trimmed = journal.ops_trimmed_before()
    if trimmed > as_of + 1:
        held = "none is there" if as_of == 0 else f"it holds only up to seq {as_of}"
        raise StorageError(
            f"op records below seq {trimmed} were trimmed from the journal and need the "
            f"compaction at {compaction}, but {held}",
            path=str(journal.path),
        )
    if as_of and compaction is not None:
        yield from read_op_records(Path(compaction) / RECORDS_DIR)
    yield from journal.all_ops(as_of + 1)


def load_store(compaction: Path, journal: Path | None = None) -> tuple[MapStore, int]:
    """A store holding the compacted state, plus the journal's ops after it when ``journal`` is
    given; returns the store and the last journal seq it reflects."""
    compaction = Path(compaction)
    as_of = _as_of(compaction)
    store = fold_dataset(compaction / RECORDS_DIR)
    last = as_of
    if journal is not None:
        with Journal(journal, readonly=True) as j:
            for entry in j.read(as_of + 1):
                if isinstance(entry.record, OpRecord):
                    store.apply(entry.record)
                last = entry.seq
    return store, last
