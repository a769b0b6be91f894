"""The effect authority's lease and idempotency records, in the journal's SQLite file.

Two tables beside the journal's log (``effect_leases``: one row per lease name;
``effect_records``: one row per effect key), written with the journal's durability by any
number of processes on this host: each decision is one ``BEGIN IMMEDIATE`` transaction that
reads the lease row, checks it (``effects.ledger``) and writes, so two processes never both
see a lease as theirs, and an intent or outcome is recorded only under the current token.
Times are wall-clock seconds (``time.time`` unless a clock is injected): the processes of
one host share that clock.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from octosync.effects.ledger import Decision, Lease, State, acquire, check_held, decide
from octosync.errors import StorageError
from octosync.store.journal import journal_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effect_leases (
    name TEXT PRIMARY KEY, holder TEXT NOT NULL, token INTEGER NOT NULL, expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS effect_records (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, token INTEGER NOT NULL, at REAL NOT NULL
);
"""


class JournalEffects:
    """Lease ``name`` and its effects' records in ``DATA/journal.sqlite3``."""

    def __init__(
        self,
        data_dir: Path,
        name: str = "effects",
        *,
        clock: Callable[[], float] = time.time,
        durability: str = "full",
    ) -> None:
        self.name = name
        self.clock = clock
        path = journal_path(data_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                str(path), isolation_level=None, timeout=30, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the effect records: {exc}", path=str(path)) from exc

    @contextmanager
    def _txn(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"effect records are unavailable: {exc}") from exc
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StorageError(f"an effect record could not be committed: {exc}") from exc

    def _lease(self, db: sqlite3.Connection) -> Lease | None:
        row = db.execute(
            "SELECT holder, token, expires FROM effect_leases WHERE name = ?", (self.name,)
        ).fetchone()
        return None if row is None else Lease(row[0], int(row[1]), float(row[2]))

    def lease(self) -> Lease | None:
        """The lease as it stands (inspection)."""
        return self._lease(self._db)

    def acquire(self, holder: str, ttl: float) -> Lease | None:
        """Take or renew the lease; None while another holder's term runs."""
        with self._txn() as db:
            new = acquire(self._lease(db), holder, ttl, self.clock())
            if new is not None:
                db.execute(
                    "INSERT OR REPLACE INTO effect_leases VALUES (?, ?, ?, ?)",
                    (self.name, new.holder, new.token, new.expires),
                )
            return new

    def release(self, lease: Lease) -> None:
        """End this term now (a later ``acquire`` by anyone starts the next token)."""
        with self._txn() as db:
            current = self._lease(db)
            if current is not None and current.token == lease.token:
                db.execute("UPDATE effect_leases SET expires = ? WHERE name = ?", (0.0, self.name))

    def begin(self, lease: Lease, key: str) -> Decision:
        """Decide ``key`` under ``lease``; a FIRE decision records the intent first."""
        with self._txn() as db:
            now = self.clock()
            check_held(self._lease(db), lease, now)
            row = db.execute("SELECT state FROM effect_records WHERE key = ?", (key,)).fetchone()
            decision = decide(None if row is None else State(row[0]))
            if decision is Decision.FIRE:
                db.execute(
                    "INSERT INTO effect_records VALUES (?, ?, ?, ?)",
                    (key, State.INTENT.value, lease.token, now),
                )
            return decision

    def retry(self, lease: Lease, key: str) -> None:
        """An in-doubt effect found not to have fired: record a fresh intent to fire it."""
        self._record(lease, key, State.INTENT)

    def done(self, lease: Lease, key: str) -> None:
        """Record that ``key`` fired (its outcome is known)."""
        self._record(lease, key, State.DONE)

    def _record(self, lease: Lease, key: str, state: State) -> None:
        with self._txn() as db:
            now = self.clock()
            check_held(self._lease(db), lease, now)
            db.execute(
                "INSERT OR REPLACE INTO effect_records VALUES (?, ?, ?, ?)",
                (key, state.value, lease.token, now),
            )

    def count(self, state: State) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM effect_records WHERE state = ?", (state.value,)
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._db.close()


class AsyncJournalEffects:
    """``JournalEffects`` for ``client.effects.EffectAuthority``: each call is one short
    local transaction, run on a worker thread so a busy lock never stalls the event loop."""

    def __init__(self, effects: JournalEffects) -> None:
        self.sync = effects

    async def acquire(self, holder: str, ttl: float) -> Lease | None:
        return await asyncio.to_thread(self.sync.acquire, holder, ttl)

    async def release(self, lease: Lease) -> None:
        await asyncio.to_thread(self.sync.release, lease)

    async def begin(self, lease: Lease, key: str) -> Decision:
        return await asyncio.to_thread(self.sync.begin, lease, key)

    async def retry(self, lease: Lease, key: str) -> None:
        await asyncio.to_thread(self.sync.retry, lease, key)

    async def done(self, lease: Lease, key: str) -> None:
        await asyncio.to_thread(self.sync.done, lease, key)
