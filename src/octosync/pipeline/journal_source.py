"""The journal as a Spark data source: ``DATA/journal.sqlite3`` read directly, batch or stream.

::

    register(spark)
    ops = spark.read.format("octosync-journal").load("var")            # every op record
    frames = spark.read.format("octosync-journal").option("kind", "frames").load("var")
    live = spark.readStream.format("octosync-journal").load("var")     # new ops as they commit

A Python data source (``pyspark.sql.datasource``): Spark plans a read as seq ranges of
``partitionSeqs`` seqs (250,000) and each task opens the SQLite file read-only and decodes
its range (WAL: a reader sees committed records only, and never blocks the server's
writer). The stream's offset is the journal's ``seq``: a micro-batch reads the seqs after the
last one a checkpoint records up to the latest committed one (at most ``maxRecordsPerBatch``
seqs when given). Seqs are assigned in commit order and never reused, so the records in
``(start, end]`` are the same whenever they are read, which is what makes a restart from a
checkpoint read each record exactly once; a range the journal's trim already removed is an
error, not a silent gap. Rows come in the export's schemas (``store.datasets``), so every job
reads this source and the Parquet export alike.

Options: ``kind`` (``ops``, ``frames``, ``chain_events``, ``chain_states``, ``dataspace``,
``plane`` or ``yjs_updates``), ``partitionSeqs``, ``startSeq`` and ``endSeq`` (a batch read of
part of the journal; a stream's first and last seq), ``maxRecordsPerBatch``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from octosync.errors import PipelineError
from octosync.store.datasets import DATASETS

NAME: Final = "octosync-journal"
KINDS: Final = tuple(d.name for d in DATASETS)
"""Every dataset of ``store.datasets``."""
PARTITION_SEQS: Final = 250_000
"""Seqs per Spark task: large enough that a task's start-up is small beside its work."""
STREAM_TASKS: Final = 2
"""A micro-batch is decoded by at least this many tasks (when it has as many seqs): a batch is
usually far below ``partitionSeqs``, and one task would leave the other cores idle."""
READ_CHUNK: Final = 20_000
"""Rows fetched from SQLite and turned into one Arrow batch at a time (bounded memory)."""


def register(spark: Any) -> None:
    """Make ``format("octosync-journal")`` known to ``spark`` (classic or Connect)."""
    spark.dataSource.register(JournalSource)


class SeqRange(InputPartition):
    """Seqs ``lo <= seq <= hi`` of the journal in ``data``."""

    def __init__(self, data: str, kind: str, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.data = data
        self.kind = kind
        self.lo = lo
        self.hi = hi


def seq_ranges(data: str, kind: str, first: int, last: int, size: int) -> list[SeqRange]:
    """``first..last`` cut into ranges of ``size`` seqs."""
    return [
        SeqRange(data, kind, lo, min(last, lo + size - 1)) for lo in range(first, last + 1, size)
    ]


def _arrow_schema(kind: str) -> Any:
    from octosync.store.datasets import BY_NAME

    return BY_NAME[kind].schema


def read_range(part: SeqRange) -> Iterator[Any]:
    """The records of ``part`` as Arrow record batches (what a Spark task yields)."""
    from octosync.store.datasets import BY_NAME, record_batch
    from octosync.store.journal import Journal

    dataset = BY_NAME[part.kind]
    with Journal(Path(part.data), readonly=True) as journal:
        start = part.lo
        while start <= part.hi:
            rows = journal.raw_rows(start, part.hi, limit=READ_CHUNK, kind=dataset.kind)
            if not rows:
                return
            yield record_batch(dataset, rows)
            start = rows[-1].seq + 1


def read_partition(partition: InputPartition) -> Iterator[Any]:
    """A planned range; nothing for the one empty partition Spark plans when ``partitions``
    returned none (a journal without records of the kind)."""
    if not isinstance(partition, SeqRange):
        return iter(())
    return read_range(partition)


class _Options:
    """The source's options, checked once where Spark plans the read."""

    def __init__(self, options: Mapping[str, str]) -> None:
        path = options.get("path")
        if not path:
            raise PipelineError(f"{NAME}: load(DATA) needs the data directory", path="path")
        self.data = str(Path(path).resolve())
        self.kind = options.get("kind", "ops")
        if self.kind not in KINDS:
            raise PipelineError(f"{NAME}: kind must be one of {KINDS}", path="kind")
        self.partition_seqs = self._int(options, "partitionSeqs", PARTITION_SEQS)
        self.start_seq = self._int(options, "startSeq", 1)
        self.end_seq = self._int(options, "endSeq", 2**62)
        self.max_records = self._int(options, "maxRecordsPerBatch", 0)

    @staticmethod
    def _int(options: Mapping[str, str], name: str, default: int) -> int:
        try:
            value = int(options.get(name, default))
        except ValueError:
            raise PipelineError(f"{NAME}: {name} must be an integer", path=name) from None
        if value < (0 if name == "maxRecordsPerBatch" else 1):
            raise PipelineError(f"{NAME}: {name} must be positive", path=name)
        return value

    def bounds(self) -> tuple[int, int]:
        """The journal's first readable seq and its latest committed one."""
        from octosync.store.journal import Journal

        with Journal(Path(self.data), readonly=True) as journal:
            return journal.trimmed_before(), journal.latest_seq()

    def ever_held(self) -> bool:
        """Whether the journal ever had a record of this kind (its side table of scopes: no
        scan); a read of a kind it never had plans no task."""
        from octosync.store.datasets import BY_NAME
        from octosync.store.journal import Journal

        with Journal(Path(self.data), readonly=True) as journal:
            return bool(journal.scopes(BY_NAME[self.kind].kind))


class JournalSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(_arrow_schema(_Options(self.options).kind))

    def reader(self, schema: Any) -> DataSourceReader:
        return JournalReader(_Options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return JournalStreamReader(_Options(self.options))


class JournalReader(DataSourceReader):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        if not o.ever_held():
            return []
        first, last = o.bounds()
        return seq_ranges(
            o.data, o.kind, max(first, o.start_seq), min(last, o.end_seq), o.partition_seqs
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)


class JournalStreamReader(DataSourceStreamReader):
    """Offsets are ``{"seq": N}``: every record up to seq ``N`` has been read."""

    def __init__(self, options: _Options) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        return {"seq": self.options.start_seq - 1}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        _, last = self.options.bounds()
        last = min(last, self.options.end_seq)  # a stream run up to a seq, then stopped
        if isinstance(limit, ReadMaxRows):  # else all that is there
            last = min(last, int(start["seq"]) + int(limit.max_rows))
        return {"seq": max(last, int(start["seq"]))}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.options.max_records:
            return ReadMaxRows(self.options.max_records)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, int]:
        return {"seq": self.options.bounds()[1]}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        o = self.options
        first, last = int(start["seq"]) + 1, int(end["seq"])
        if first > last or not o.ever_held():
            return []
        trimmed_before, _ = o.bounds()
        if first < trimmed_before:
            raise PipelineError(
                f"{NAME}: the stream needs seqs from {first} but the journal was trimmed below "
                f"{trimmed_before}; start a new checkpoint from a compaction",
                path=o.data,
            )
        size = min(o.partition_seqs, -(-(last - first + 1) // STREAM_TASKS))
        return seq_ranges(o.data, o.kind, first, last, max(1, size))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the journal keeps its records until a trim."""
