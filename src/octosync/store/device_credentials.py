"""TopGun device credentials in ``DATA/device_credentials.sqlite3`` (secret hashes only).

``present_or_mint`` is one transaction, committed (``synchronous=FULL``) before the caller
answers: a device token handed out is a token honoured after a restart. The rules are
``refresh.device_tokens``'s. The file is bounded: an owner keeps its
``DEVICES_PER_OWNER`` most recently seen devices (a client that loses its storage mints a
new one on every connect and pushes only its own owner's oldest out); a device pushed out
is given a new identity when it comes back. Not thread-safe: the server calls it from one
worker thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from octosync.errors import StorageError
from octosync.refresh.device_tokens import Binding, Minted, claim, matches, owner_key
from octosync.store.credential_file import Transaction, open_credentials

FILE_NAME = "device_credentials.sqlite3"
DEVICES_PER_OWNER = 256
"""Devices one owner (a JWT subject, or the anonymous ``--insecure-dev`` namespace) keeps."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS device_credentials (
    owner TEXT NOT NULL,
    device_id TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    seen INTEGER NOT NULL,
    PRIMARY KEY (owner, device_id)
);
CREATE INDEX IF NOT EXISTS device_credentials_seen ON device_credentials (owner, seen);
"""


class DeviceCredentials:
    """The device credentials of one data folder."""

    def __init__(self, data_dir: Path, *, per_owner: int = DEVICES_PER_OWNER) -> None:
        self.per_owner = per_owner
        self.path = data_dir / FILE_NAME
        self._db = open_credentials(self.path, _SCHEMA, "device credentials")

    def present_or_mint(
        self, subject: str | None, presented: str | None, fresh: Callable[[], Minted]
    ) -> Binding:
        """The device ``presented`` names when it is ``subject``'s and its secret matches;
        else a new identity from ``fresh()``, kept before it is returned."""
        owner = owner_key(subject)
        found = claim(presented)
        with Transaction(self._db, "bind the device", self.path):
            seen = self._next_seen(owner)
            if found is not None and matches(self._kept(owner, found.device_id), found):
                self._db.execute(
                    "UPDATE device_credentials SET seen = ? WHERE owner = ? AND device_id = ?",
                    (seen, owner, found.device_id),
                )
                return Binding(found.device_id)
            minted = fresh()
            self._db.execute(
                "INSERT INTO device_credentials (owner, device_id, secret_hash, seen)"
                " VALUES (?, ?, ?, ?)",
                (owner, minted.device_id, minted.secret_hash, seen),
            )
            self._db.execute(
                "DELETE FROM device_credentials WHERE owner = ? AND device_id IN"
                " (SELECT device_id FROM device_credentials WHERE owner = ?"
                " ORDER BY seen DESC LIMIT -1 OFFSET ?)",
                (owner, owner, self.per_owner),
            )
            return Binding(minted.device_id, minted.token)

    def devices(self, subject: str | None) -> list[str]:
        """The device ids ``subject`` keeps, most recently seen first."""
        try:
            rows = self._db.execute(
                "SELECT device_id FROM device_credentials WHERE owner = ? ORDER BY seen DESC",
                (owner_key(subject),),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(
                f"cannot read the device credentials: {exc}", path=str(self.path)
            ) from exc
        return [row[0] for row in rows]

    def close(self) -> None:
        self._db.close()

    def _kept(self, owner: str, device_id: str) -> bytes | None:
        row = self._db.execute(
            "SELECT secret_hash FROM device_credentials WHERE owner = ? AND device_id = ?",
            (owner, device_id),
        ).fetchone()
        return None if row is None else bytes(row[0])

    def _next_seen(self, owner: str) -> int:
        """A counter per owner, not a clock: which device was seen last survives clock steps."""
        row = self._db.execute(
            "SELECT COALESCE(MAX(seen), 0) + 1 FROM device_credentials WHERE owner = ?", (owner,)
        )
        return int(row.fetchone()[0])
