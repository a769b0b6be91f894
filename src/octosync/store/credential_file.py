"""One SQLite file of server-issued credentials under the data folder (refresh tokens,
device credentials): opened in WAL with ``synchronous=FULL``, every write one transaction
committed before the caller answers, and every SQLite error a ``StorageError`` naming the file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

from octosync.errors import StorageError


def open_credentials(path: Path, schema: str, what: str) -> sqlite3.Connection:
    """Open (creating it and its folder) the file at ``path`` with ``schema`` applied."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(schema)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open the {what}: {exc}", path=str(path)) from exc
    return db


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; any SQLite error rolls back and is ``StorageError``."""

    def __init__(self, db: sqlite3.Connection, what: str, path: Path) -> None:
        self.db = db
        self.what = what
        self.path = path

    def __enter__(self) -> None:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot {self.what}: {exc}", path=str(self.path)) from exc

    def __exit__(self, kind: object, exc: BaseException | None, _tb: object) -> Literal[False]:
        if exc is None:
            try:
                self.db.execute("COMMIT")
                return False
            except sqlite3.Error as err:
                exc = err
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StorageError(f"cannot {self.what}: {exc}", path=str(self.path)) from exc
        return False
