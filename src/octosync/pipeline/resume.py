"""Restart an in-process ``crdt.MapStore`` from a Spark compaction plus the journal's tail.

``compact`` writes ``records/`` (names in ``pipeline.layout``): the op records that still
carry state (each LWW winner, every OR and counter op). Folding them gives exactly the
compacted state; folding the journal's records after ``as_of_seq`` on top continues where the
compaction stopped. Plain pyarrow and Python: no Spark needed to load.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds

from octosync.crdt.fold import MapStore
from octosync.crdt.op import OpRecord
from octosync.errors import PipelineError
from octosync.pipeline.layout import META_FILE, RECORDS_DIR
from octosync.store.journal import Journal
from octosync.store.op_table import RECORD_SCHEMA, iter_op_records


def read_op_records(path: Path, *, batch_size: int = 65_536) -> Iterator[OpRecord]:
    """Op records from a Parquet dataset in the ops schema, a batch at a time (bounded memory)."""
    dataset = ds.dataset(str(path), format="parquet")
    return iter_op_records(dataset.to_batches(columns=RECORD_SCHEMA.names, batch_size=batch_size))


def fold_dataset(path: Path, store: MapStore | None = None) -> MapStore:
    """Fold every op record of a Parquet dataset into ``store`` (a new one by default)."""
    store = MapStore() if store is None else store
    store.apply_all(read_op_records(path))
    return store


def load_store(compaction: Path, journal: Path | None = None) -> tuple[MapStore, int]:
    """A store holding the compacted state, plus the journal's ops after it when ``journal`` is
    given; returns the store and the last journal seq it reflects."""
    compaction = Path(compaction)
    try:
        meta = json.loads((compaction / META_FILE).read_text())
        as_of = int(meta["as_of_seq"])
    except (OSError, ValueError, KeyError) as exc:
        raise PipelineError(f"not a compaction: {exc}", path=str(compaction)) from exc
    store = fold_dataset(compaction / RECORDS_DIR)
    last = as_of
    if journal is not None:
        with Journal(journal, readonly=True) as j:
            for entry in j.read(as_of + 1):
                if isinstance(entry.record, OpRecord):
                    store.apply(entry.record)
                last = entry.seq
    return store, last
