"""The durable journal: one append-only, seq-numbered log in SQLite (WAL) under the data dir.

It holds CRDT op records and hub stream frames (``records.py``; later kinds slot in there).
``seq`` increases by one per record, is never reused, and is the order the server accepted
records in. A transaction is atomic, so after ``kill -9`` at any point a reopened journal shows
every committed record and no part of an uncommitted one.

Durability modes (``durability=``):

* ``full``   -- ``synchronous=FULL``: the WAL is fsynced at every commit, so an acknowledged
  record survives a process crash *and* a power loss / OS crash.
* ``normal`` -- ``synchronous=NORMAL``: commits reach the OS but are fsynced only at WAL
  checkpoints. A process crash (``kill -9``) still loses nothing acknowledged; a power loss or
  OS crash may lose the commits since the last checkpoint (at most about 1,000 WAL pages, the
  SQLite auto-checkpoint size). Several times faster per small commit.

Two ways to append (both acknowledge only after the commit):

* ``Journal.append(records) -> list[int]``: synchronous, one transaction per call, in the
  calling thread. For tools, tests and the generator.
* ``GroupCommitWriter``: a writer thread with a bounded queue. ``submit(records)`` returns a
  ``concurrent.futures.Future[list[int]]`` (the seqs) that resolves after the commit holding
  them; ``await writer.append_async(records)`` is the asyncio form; ``writer.append(records)``
  blocks. Whatever queued up while the previous commit was being fsynced goes into the next
  transaction, so many appends share one transaction and one fsync. Records are validated and
  encoded in the caller (an invalid record raises ``InvalidRecord`` at ``submit`` and nothing
  is appended)::

      writer = GroupCommitWriter(Path("var"), durability="full")   # starts its thread
      seqs = await writer.append_async([StreamFrame(stream="s", base_epoch=0, epoch=0,
                                                    snapshot=True, payload=frame_bytes)])
      writer.close()                                                # drains, then stops

Reading: ``read(start, stop)`` by seq range, ``ops(map)``, ``frames(stream)``, ``latest_seq()``,
``scopes(kind)`` (every stream or map that ever had a record, kept in a side table so listing
them does not scan the log). Readers in other processes see committed records only (WAL
snapshot isolation).

Retention: ``put_checkpoints`` stores per-stream checkpoints (``StreamCheckpoint``: the frames
that rebuild a stream as of a seq) in the same file, and ``trim(before, exported_through=W)``
deletes records with ``seq < before`` only when every one of them is exported (``seq <= W``)
and every stream frame among them is covered by its stream's checkpoint; otherwise it raises
``TrimRefused`` and deletes nothing. Seqs stay unique after a trim: the trim point is recorded,
and appends continue above it even when every row was trimmed. Op records (TopGun's maps are
rebuilt from them) are trimmed only below ``ops_before``, the first seq a ``pipeline compact``
output does not cover; ``ops_trimmed_before()`` says how far that went.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec

from octosync.crdt.op import OpRecord
from octosync.errors import JournalUnavailable, StorageError, TrimRefused
from octosync.store.records import (
    KIND_DROP,
    KIND_FRAME,
    KIND_OP,
    KIND_PLANE,
    KIND_YJS,
    EncodedRecord,
    Record,
    StreamCheckpoint,
    decode_checkpoint,
    decode_record,
    encode_checkpoint,
    encode_record,
)
from octosync.store.stream_progress import lowest_committed

log = logging.getLogger(__name__)

Durability = Literal["full", "normal"]
JOURNAL_FILE: Final = "journal.sqlite3"
SCHEMA_VERSION: Final = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    recorded_ms INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_by_scope ON journal (kind, scope, seq);
CREATE TABLE IF NOT EXISTS journal_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journal_scopes (
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    PRIMARY KEY (kind, scope)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    stream TEXT PRIMARY KEY,
    through_seq INTEGER NOT NULL,
    body BLOB NOT NULL
);
"""
_TRIMMED_BEFORE: Final = "trimmed_before"
_OPS_TRIMMED_BEFORE: Final = "ops_trimmed_before"
_SCOPES_INDEXED: Final = "scopes_indexed"
_LATEST_SQL: Final = (
    "SELECT max(coalesce((SELECT max(seq) FROM journal), 0), "
    "coalesce((SELECT CAST(value AS INTEGER) FROM journal_meta WHERE name = 'trimmed_before'), 1)"
    " - 1)"
)
"""The highest seq ever committed: the last row, or the trim point if every row was trimmed."""
_TRIM_CHUNK: Final = 50_000


class Entry(msgspec.Struct, frozen=True):
    """One committed record with its place in the log and the server time it was appended."""

    seq: int
    kind: str
    recorded_ms: int
    record: Record


class RawRow(msgspec.Struct, frozen=True, array_like=True):
    """A row as stored, for bulk readers (the Parquet export) that decode by kind themselves."""

    seq: int
    kind: str
    recorded_ms: int
    body: bytes


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def journal_path(data_dir: Path) -> Path:
    return Path(data_dir) / JOURNAL_FILE


def _connect(path: Path, durability: Durability, *, readonly: bool) -> sqlite3.Connection:
    if durability not in ("full", "normal"):
        raise StorageError(f"unknown durability mode {durability!r}", path="durability")
    try:
        if readonly:
            if not path.exists():
                raise StorageError("no journal here", path=str(path))
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO journal_meta VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            _index_scopes_once(conn)
        conn.execute(f"PRAGMA synchronous={durability.upper()}")
        conn.execute("PRAGMA busy_timeout=10000")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open journal: {exc}", path=str(path)) from exc
    return conn


def _index_scopes_once(conn: sqlite3.Connection) -> None:
    """A journal written before ``journal_scopes`` existed gets its scopes listed once."""
    done = conn.execute("SELECT 1 FROM journal_meta WHERE name = ?", (_SCOPES_INDEXED,))
    if done.fetchone() is not None:
        return
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT OR IGNORE INTO journal_scopes SELECT DISTINCT kind, scope FROM journal")
    conn.execute("INSERT OR IGNORE INTO journal_meta VALUES (?, '1')", (_SCOPES_INDEXED,))
    conn.execute("COMMIT")


def _roll_back(conn: sqlite3.Connection) -> None:
    """End a failed transaction; SQLite may have rolled it back already (a full disk), and a
    rollback that fails too leaves nothing to keep."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


_NO_CKPT_ON_CLOSE: Final = 1006
"""``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` (sqlite3.h)."""


def _skip_checkpoint_on_close(conn: sqlite3.Connection) -> None:
    """The last connection to close checkpoints the WAL, writing the mapped shared-memory
    index: SIGBUS when that file became unwritable. Told not to, it closes cleanly and the
    next open checkpoints instead. Python 3.12 has ``setconfig``; on 3.11 the flag is set
    through the C API on the handle, the first field of CPython's connection object."""
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:
        setconfig(_NO_CKPT_ON_CLOSE, True)
        return
    import _sqlite3
    import ctypes

    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    db_config = ctypes.CDLL(_sqlite3.__file__).sqlite3_db_config
    db_config.restype = ctypes.c_int
    db_config(ctypes.c_void_p(handle), _NO_CKPT_ON_CLOSE, 1, ctypes.c_void_p(None))


class TrimResult(msgspec.Struct, frozen=True):
    before: int
    deleted: int
    held_at: int | None = None
    """The trim point a registered stream held it to, lower than the one asked for
    (``store.stream_progress``); None when none did."""


ROWS_PER_INSERT = 128
"""Rows one ``INSERT`` statement carries (640 parameters, under SQLite's oldest limit of 999)."""
_INSERT_ROWS = {
    n: "INSERT INTO journal (seq, kind, scope, recorded_ms, body) VALUES "
    + ",".join(["(?,?,?,?,?)"] * n)
    for n in (1 << b for b in range(ROWS_PER_INSERT.bit_length()))
}
"""One statement per power of two up to ``ROWS_PER_INSERT``: few enough to stay prepared."""


def _insert_rows(
    conn: sqlite3.Connection, encoded: Sequence[EncodedRecord], first: int, now: int
) -> None:
    """The rows of ``encoded`` from seq ``first``, many per statement: ``executemany`` steps
    SQLite once per row, each step a release and re-take of the GIL the event loop waits
    for; a multi-row ``INSERT`` binds in C and steps once."""
    at, total = 0, len(encoded)
    while at < total:
        n = min(ROWS_PER_INSERT, 1 << ((total - at).bit_length() - 1))
        params: list[object] = []
        for i in range(at, at + n):
            e = encoded[i]
            params += (first + i, e.kind, e.scope, now, e.body)
        conn.execute(_INSERT_ROWS[n], params)
        at += n


class Journal:
    """Synchronous access to one journal file; safe to share between threads (one lock)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        durability: Durability = "full",
        readonly: bool = False,
        clock: Callable[[], int] = _wall_ms,
    ) -> None:
        self.path = journal_path(data_dir)
        self.durability = durability
        self._clock = clock
        self._lock = threading.Lock()
        self._readonly = readonly
        self._shm = self.path.with_name(self.path.name + "-shm")
        self._conn = _connect(self.path, durability, readonly=readonly)

    def _index_unwritable(self) -> bool:
        """The shared-memory index exists and this process may not write it."""
        return not self._readonly and not os.access(self._shm, os.W_OK) and self._shm.exists()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The connection, for one thread at a time, once the shared-memory index is
        writable: SQLite maps ``journal.sqlite3-shm`` into memory, and the first write to a
        mapped page of a file made unwritable (``chattr +i``, a read-only remount) is not an
        error but SIGBUS, which kills the process. Checked before every use, so an
        unwritable file is a ``StorageError`` (the writer then refuses writes and retries)."""
        with self._lock:
            if self._index_unwritable():
                raise StorageError(
                    "the journal's shared-memory index is not writable", path=str(self._shm)
                )
            yield

    # -- writing -------------------------------------------------------------------------------

    def append(self, records: Iterable[Record]) -> list[int]:
        """Append in one transaction; returns the seqs once committed."""
        return self.append_encoded([encode_record(r) for r in records])

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; any SQLite error rolls it back as a ``StorageError``."""
        with self._held():
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _roll_back(conn)
                raise StorageError(f"{what} failed: {exc}", path=str(self.path)) from exc

    def append_encoded(self, encoded: Sequence[EncodedRecord]) -> list[int]:
        if not encoded:
            return []
        now = self._clock()
        with self._transaction("append") as conn:
            (last,) = conn.execute(_LATEST_SQL).fetchone()
            first = int(last) + 1
            _insert_rows(conn, encoded, first, now)
            conn.executemany(
                "INSERT OR IGNORE INTO journal_scopes (kind, scope) VALUES (?, ?)",
                {(e.kind, e.scope) for e in encoded},
            )
        return list(range(first, first + len(encoded)))

    def replace_scoped(
        self, kind: str, scope: str, through: int, encoded: Sequence[EncodedRecord]
    ) -> int:
        """In one transaction, delete the rows of one scope with ``seq <= through`` and append
        ``encoded`` (at least one record) in their place; returns how many rows went. The
        journal holds the old rows or their replacement, never neither (a crash rolls the
        transaction back)."""
        if not encoded:
            raise ValueError("a replacement needs at least one record")
        now = self._clock()
        with self._transaction("compaction") as conn:
            # Seqs are taken before the delete: a seq once used is never used again.
            (last,) = conn.execute(_LATEST_SQL).fetchone()
            cur = conn.execute(
                "DELETE FROM journal WHERE kind = ? AND scope = ? AND seq <= ?",
                (kind, scope, through),
            )
            _insert_rows(conn, encoded, int(last) + 1, now)
        return int(cur.rowcount)

    def count_scoped(self, kind: str, scope: str) -> int:
        """How many rows of ``kind`` one scope has."""
        with self._held():
            (count,) = self._conn.execute(
                "SELECT count(*) FROM journal WHERE kind = ? AND scope = ?", (kind, scope)
            ).fetchone()
        return int(count)

    # -- reading -------------------------------------------------------------------------------

    def latest_seq(self) -> int:
        """The highest committed seq (trimmed rows included), 0 for an empty journal."""
        with self._held():
            (last,) = self._conn.execute(_LATEST_SQL).fetchone()
        return int(last)

    def trimmed_before(self) -> int:
        """Every record below this seq was trimmed (1 when nothing was)."""
        with self._held():
            row = self._conn.execute(
                "SELECT CAST(value AS INTEGER) FROM journal_meta WHERE name = ?",
                (_TRIMMED_BEFORE,),
            ).fetchone()
        return 1 if row is None else int(row[0])

    def scopes(self, kind: str) -> list[str]:
        """Every scope (stream id, map name) that has had a record of ``kind``, sorted."""
        with self._held():
            return self._scopes_locked(kind)

    def _scopes_locked(self, kind: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT scope FROM journal_scopes WHERE kind = ? ORDER BY scope", (kind,)
        ).fetchall()
        return [r[0] for r in rows]

    def raw_rows(
        self, start: int, stop: int, *, limit: int, kind: str | None = None
    ) -> list[RawRow]:
        """Rows with ``start <= seq <= stop`` (of one ``kind`` when given) in seq order, at
        most ``limit`` of them."""
        kinds = "" if kind is None else "AND kind = ? "
        with self._held():
            rows = self._conn.execute(
                "SELECT seq, kind, recorded_ms, body FROM journal "
                f"WHERE seq >= ? AND seq <= ? {kinds}ORDER BY seq LIMIT ?",
                (start, stop, *(() if kind is None else (kind,)), limit),
            ).fetchall()
        return [RawRow(*row) for row in rows]

    def read(
        self, start: int = 1, stop: int | None = None, *, chunk: int = 10_000
    ) -> Iterator[Entry]:
        """Committed records with ``start <= seq <= stop`` (``stop`` None: up to the latest)."""
        end = self.latest_seq() if stop is None else stop
        while start <= end:
            rows = self.raw_rows(start, end, limit=chunk)
            if not rows:
                return
            for row in rows:
                yield Entry(
                    row.seq,
                    row.kind,
                    row.recorded_ms,
                    decode_record(row.kind, row.body, seq=row.seq),
                )
            start = rows[-1].seq + 1

    def scoped_rows(self, kind: str, scope: str, start: int, stop: int) -> list[RawRow]:
        """The rows of one scope with ``start <= seq <= stop``, undecoded, in seq order."""
        with self._held():
            rows = self._conn.execute(
                "SELECT seq, kind, recorded_ms, body FROM journal "
                "WHERE kind = ? AND scope = ? AND seq >= ? AND seq <= ? ORDER BY seq",
                (kind, scope, start, stop),
            ).fetchall()
        return [RawRow(*row) for row in rows]

    def _scoped(self, kind: str, scope: str, start: int) -> Iterator[Entry]:
        for row in self.scoped_rows(kind, scope, start, 2**63 - 1):
            yield Entry(
                row.seq, row.kind, row.recorded_ms, decode_record(kind, row.body, seq=row.seq)
            )

    def ops(self, map_name: str, start: int = 1) -> Iterator[Entry]:
        """The op records of one map, in seq order."""
        return self._scoped(KIND_OP, map_name, start)

    def all_ops(self, start: int = 1, *, chunk: int = 10_000) -> Iterator[OpRecord]:
        """Every op record (of every map) in seq order: what TopGun maps are rebuilt from."""
        while True:
            with self._held():
                rows = self._conn.execute(
                    "SELECT seq, body FROM journal WHERE kind = ? AND seq >= ? "
                    "ORDER BY seq LIMIT ?",
                    (KIND_OP, start, chunk),
                ).fetchall()
            if not rows:
                return
            for seq, body in rows:
                record = decode_record(KIND_OP, body, seq=seq)
                assert isinstance(record, OpRecord)
                yield record
            start = rows[-1][0] + 1

    def frames(self, stream: str, start: int = 1) -> Iterator[Entry]:
        """The frames of one stream, in seq (acceptance) order."""
        return self._scoped(KIND_FRAME, stream, start)

    # -- checkpoints and retention -------------------------------------------------------------

    def put_checkpoints(self, checkpoints: Iterable[StreamCheckpoint]) -> int:
        """Store (replace) checkpoints in one transaction; one never moves back in seq."""
        rows = [(c.stream, c.through_seq, encode_checkpoint(c)) for c in checkpoints]
        if not rows:
            return 0
        with self._held():
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT INTO checkpoints (stream, through_seq, body) VALUES (?, ?, ?) "
                    "ON CONFLICT (stream) DO UPDATE SET through_seq = excluded.through_seq, "
                    "body = excluded.body WHERE excluded.through_seq >= checkpoints.through_seq",
                    rows,
                )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _roll_back(conn)
                raise StorageError(f"checkpoint failed: {exc}", path=str(self.path)) from exc
        return len(rows)

    def checkpoints(self) -> dict[str, StreamCheckpoint]:
        """The newest checkpoint of every stream that has one."""
        with self._held():
            rows = self._conn.execute("SELECT stream, body FROM checkpoints").fetchall()
        return {stream: decode_checkpoint(body, stream=stream) for stream, body in rows}

    def uncovered_frames(self, before: int) -> list[tuple[str, int]]:
        """``(stream, seq)`` of each stream's newest frame (or drop) below ``before`` that its
        checkpoint does not cover: what a trim to ``before`` would lose."""
        out: dict[str, int] = {}
        with self._held():
            conn = self._conn
            covered = dict(conn.execute("SELECT stream, through_seq FROM checkpoints").fetchall())
            for kind in (KIND_FRAME, KIND_DROP):
                for stream in self._scopes_locked(kind):
                    # One index seek per stream: O(streams), whatever the journal's length.
                    (last,) = conn.execute(
                        "SELECT max(seq) FROM journal WHERE kind = ? AND scope = ? AND seq < ?",
                        (kind, stream, before),
                    ).fetchone()
                    if last is not None and covered.get(stream, 0) < last:
                        out[stream] = max(out.get(stream, 0), int(last))
        return sorted(out.items())

    def ops_trimmed_before(self) -> int:
        """Every op record below this seq was trimmed (1 when none was): a restart needs a
        compaction that covers them (``pipeline.resume``)."""
        with self._held():
            row = self._conn.execute(
                "SELECT CAST(value AS INTEGER) FROM journal_meta WHERE name = ?",
                (_OPS_TRIMMED_BEFORE,),
            ).fetchone()
        return 1 if row is None else int(row[0])

    def trim(self, before: int, *, exported_through: int, ops_before: int = 1) -> TrimResult:
        """Delete every record with ``seq < before``, or raise ``TrimRefused`` and delete none.

        Refused when a record below ``before`` is not exported (``seq > exported_through``)
        or is a stream frame its stream's checkpoint does not cover. Op records are kept below
        ``min(before, ops_before)`` only: the server rebuilds its TopGun maps from them at
        start-up, so they go only once a ``pipeline compact`` output covers them (its
        ``as_of_seq + 1`` is ``ops_before``; the default keeps every op record). CRDT plane
        records are never trimmed: each holds the only copy of its ops. Nothing after the
        lowest seq a registered continuous stream has committed is trimmed either
        (``store.stream_progress``): ``before`` is lowered to it, and ``held_at`` says so.
        Deletes run in chunks, so a concurrent writer waits for one chunk at a time, never for
        the whole trim.
        """
        if before < 1:
            raise TrimRefused("the trim point must be a seq of at least 1", path="before")
        latest = self.latest_seq()
        if before > latest + 1:
            raise TrimRefused(
                f"seq {before} is beyond the journal's latest seq {latest}", path="before"
            )
        if before - 1 > exported_through:
            raise TrimRefused(
                f"records {exported_through + 1}..{before - 1} are not exported yet "
                f"(export watermark at seq {exported_through})",
                path="before",
            )
        held_at = None
        committed = lowest_committed(self.path.parent)
        if committed is not None and committed + 1 < before:
            before = held_at = committed + 1  # a registered stream has not read the rest
        uncovered = self.uncovered_frames(before)
        if uncovered:
            stream, seq = uncovered[0]
            raise TrimRefused(
                f"{len(uncovered)} stream(s) have frames below seq {before} that no checkpoint "
                f"covers (first: stream {stream!r} at seq {seq})",
                path="before",
            )
        deleted = 0
        ops_cut = max(1, min(before, ops_before))
        with self._held():
            conn = self._conn
            try:
                while True:
                    conn.execute("BEGIN IMMEDIATE")
                    cur = conn.execute(
                        "DELETE FROM journal WHERE seq IN "
                        "(SELECT seq FROM journal WHERE seq < ? AND kind NOT IN (?, ?) "
                        "AND (kind != ? OR seq < ?) ORDER BY seq LIMIT ?)",
                        (before, KIND_PLANE, KIND_YJS, KIND_OP, ops_cut, _TRIM_CHUNK),
                    )
                    count = cur.rowcount
                    deleted += count
                    if count < _TRIM_CHUNK:
                        for name, value in (
                            (_TRIMMED_BEFORE, before),
                            (_OPS_TRIMMED_BEFORE, ops_cut),
                        ):
                            conn.execute(
                                "INSERT INTO journal_meta VALUES (?, ?) ON CONFLICT (name) DO "
                                "UPDATE SET value = max(CAST(value AS INTEGER), "
                                "CAST(excluded.value AS INTEGER))",
                                (name, str(value)),
                            )
                        conn.execute("COMMIT")
                        break
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _roll_back(conn)
                raise StorageError(f"trim failed: {exc}", path=str(self.path)) from exc
        return TrimResult(before, deleted, held_at)

    def close(self) -> None:
        with self._lock:
            if self._index_unwritable():
                _skip_checkpoint_on_close(self._conn)  # closing would write into the index
            self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Pending(msgspec.Struct):
    encoded: list[EncodedRecord]
    future: concurrent.futures.Future[list[int]]


class JournalHealth(msgspec.Struct, frozen=True):
    """What ``/healthz`` and ``/metrics`` say of the journal."""

    available: bool
    reason: str | None
    """Why commits fail (the SQLite error and the file), while they do."""
    failed_commits: int
    """Commits that failed since the writer started."""
    unwritten: int
    """Records accepted in memory whose commit failed, waiting to be written again."""


_STOP: Final = object()
RETRY_FIRST = 0.05
RETRY_MAX = 1.0
"""Seconds between attempts to write the records of a failed commit (doubling up to this)."""


class GroupCommitWriter:
    """A writer thread that commits whatever has queued up as one transaction (one fsync).

    ``max_batch`` caps the records per transaction; ``max_queue`` bounds the submissions
    waiting (``submit`` blocks when it is full: backpressure, never unbounded memory).

    A failed commit (disk full, a read-only file, an I/O error) fails the future of every
    submission in it: nobody is told that those records are durable. Their state is already
    applied in memory, though, so the records are kept and written again, first and in order,
    until a commit succeeds; until then the writer is *unavailable*: every submission that
    follows fails too (its records join the ones waiting, so the journal keeps the order they
    were accepted in), and ``check_writable`` refuses new work with ``JournalUnavailable``.
    Service resumes by itself once the records are written. Only records that reach memory
    before the fault is seen wait this way, so what waits is bounded by the queue.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        durability: Durability = "full",
        max_batch: int = 8192,
        max_queue: int = 65_536,
        clock: Callable[[], int] = _wall_ms,
    ) -> None:
        self.journal = Journal(data_dir, durability=durability, clock=clock)
        self._max_batch = max_batch
        self._queue: queue.Queue[_Pending | object] = queue.Queue(maxsize=max_queue)
        self._closed = False
        self.commits = 0
        """Transactions committed so far (appends / commits = the group-commit factor)."""
        self.failed_commits = 0
        self._unwritten: list[EncodedRecord] = []
        self._fault: JournalUnavailable | None = None
        """Set by the writer thread while commits fail; read (one attribute) by any thread."""
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    def submit(self, records: Iterable[Record]) -> concurrent.futures.Future[list[int]]:
        return self.submit_encoded([encode_record(r) for r in records])

    def submit_encoded(
        self, encoded: Sequence[EncodedRecord], *, block: bool = True
    ) -> concurrent.futures.Future[list[int]]:
        """Queue records already validated and encoded (``encode_record``) by the caller.

        ``block=False`` never waits (an event loop must not): ``StorageError`` when the queue
        is full, so check ``has_room()`` first and refuse the work instead. A submission while
        the journal is unavailable is still queued (its state may be applied already) and its
        future fails: ask ``check_writable()`` before changing state.
        """
        if self._closed:
            raise StorageError("journal writer is closed", path=str(self.journal.path))
        pending = _Pending(list(encoded), concurrent.futures.Future())
        try:
            self._queue.put(pending, block=block)
        except queue.Full:
            raise StorageError("the journal writer is behind: its queue is full") from None
        return pending.future

    def has_room(self) -> bool:
        """Whether a submission would be queued without waiting (from the submitting thread,
        the only one that adds, the answer holds until it submits)."""
        return not self._queue.full()

    def check_writable(self) -> None:
        """``JournalUnavailable`` while commits fail: refuse the work before applying it."""
        fault = self._fault
        if fault is not None:
            raise JournalUnavailable(fault.message, path=fault.path)

    def health(self) -> JournalHealth:
        fault = self._fault
        return JournalHealth(
            available=fault is None,
            reason=None if fault is None else str(fault),
            failed_commits=self.failed_commits,
            unwritten=len(self._unwritten),
        )

    def append(self, records: Iterable[Record]) -> list[int]:
        return self.submit(records).result()

    async def append_async(self, records: Iterable[Record]) -> list[int]:
        return await asyncio.wrap_future(self.submit(records))

    def _run(self) -> None:
        wait = RETRY_FIRST
        while True:
            if self._unwritten:
                wait = RETRY_FIRST if self._write_again() else min(wait * 2, RETRY_MAX)
            try:
                item = self._queue.get(timeout=wait if self._unwritten else None)
            except queue.Empty:
                continue
            if item is _STOP:
                break
            assert isinstance(item, _Pending)
            batch = [item]
            size = len(item.encoded)
            stopping = False
            while size < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                assert isinstance(nxt, _Pending)
                batch.append(nxt)
                size += len(nxt.encoded)
            self._commit(batch)
            if stopping:
                break
        if self._unwritten and not self._write_again():
            log.error(
                "journal %s: %d accepted records were never written (%s); their writers "
                "were told so and resend them",
                self.journal.path,
                len(self._unwritten),
                self._fault,
            )

    def _commit(self, batch: list[_Pending]) -> None:
        encoded = [e for p in batch for e in p.encoded]
        if self._unwritten:  # still failing: these wait behind the others, in order
            self._unwritten.extend(encoded)
            assert self._fault is not None
            self._fail(batch, self._fault)
            return
        try:
            seqs = self.journal.append_encoded(encoded)
        except Exception as exc:
            self._unwritten.extend(encoded)
            self._faulted(exc)
            assert self._fault is not None
            self._fail(batch, self._fault)
            return
        self.commits += 1
        at = 0
        for p in batch:
            n = len(p.encoded)
            p.future.set_result(seqs[at : at + n])
            at += n

    def _fail(self, batch: list[_Pending], fault: JournalUnavailable) -> None:
        for p in batch:
            p.future.set_exception(JournalUnavailable(fault.message, path=fault.path))

    def _faulted(self, exc: Exception) -> None:
        self.failed_commits += 1
        if self._fault is None:  # logged once per outage, with the file
            message, path = str(exc), str(self.journal.path)
            if isinstance(exc, StorageError):
                message, path = exc.message, exc.path or path
            self._fault = JournalUnavailable(f"the journal cannot commit: {message}", path=path)
            log.error("%s; writes are refused until it can", self._fault)

    def _write_again(self) -> bool:
        """One attempt at the records of failed commits; True once they are all written."""
        try:
            self.journal.append_encoded(self._unwritten)
        except Exception as exc:
            self._faulted(exc)
            return False
        self.commits += 1
        log.warning(
            "journal %s: commits succeed again (%d waiting records written); writes resume",
            self.journal.path,
            len(self._unwritten),
        )
        self._unwritten = []
        self._fault = None
        return True

    def close(self) -> None:
        """Commit everything already submitted, then stop the thread and close the file."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self.journal.close()

    def __enter__(self) -> GroupCommitWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
