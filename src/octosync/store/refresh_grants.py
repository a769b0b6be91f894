"""The token exchange's refresh grants in ``DATA/refresh_tokens.sqlite3`` (hashes only).

Every write is one transaction committed (``synchronous=FULL``) before the caller answers,
so a token handed out is a token held across a restart, and a write that fails raises
``StorageError``: the request fails and no token is issued. ``rotate`` spends the old grant
only while it is unspent and not revoked, in the same transaction as the new grant's insert,
so two presentations of one token cannot both rotate. Expired grants are pruned a bounded
batch at a time on each write, a subject keeps its newest ``FAMILIES_PER_SUBJECT`` families and
a family its newest ``SPENT_PER_FAMILY`` spent tokens. Not thread-safe: the server calls it
from one worker thread.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from octosync.errors import RefreshTokenReused, StorageError
from octosync.refresh.rotation import Grant, Reuse, Rotate, hash_token, redeem
from octosync.store.credential_file import Transaction, open_credentials

FILE_NAME = "refresh_tokens.sqlite3"
PRUNE_BATCH = 256
FAMILIES_PER_SUBJECT = 32
"""Families (signed-in sessions) one subject keeps; a new exchange drops the oldest past it."""
SPENT_PER_FAMILY = 64
"""Spent tokens a family keeps for reuse detection; an older one comes back as unknown."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refresh_grants (
    token_hash TEXT PRIMARY KEY,
    family TEXT NOT NULL,
    subject TEXT NOT NULL,
    roles TEXT NOT NULL,
    expires_at REAL NOT NULL,
    spent INTEGER NOT NULL DEFAULT 0,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS refresh_grants_family ON refresh_grants (family);
CREATE INDEX IF NOT EXISTS refresh_grants_expiry ON refresh_grants (expires_at);
CREATE INDEX IF NOT EXISTS refresh_grants_subject ON refresh_grants (subject);
"""


class RefreshGrants:
    """Refresh grants of one data folder, bounded per subject and per family so no client
    grows the file without end: ``families`` per subject, ``spent`` kept per family."""

    def __init__(
        self,
        data_dir: Path,
        *,
        families: int = FAMILIES_PER_SUBJECT,
        spent: int = SPENT_PER_FAMILY,
    ) -> None:
        self.families = families
        self.spent = spent
        self.path = data_dir / FILE_NAME
        self.where = str(self.path)
        self._db = open_credentials(self.path, _SCHEMA, "refresh tokens")

    def find(self, token_hash: str) -> Grant | None:
        try:
            row = self._db.execute(
                "SELECT token_hash, family, subject, roles, expires_at, spent, revoked"
                " FROM refresh_grants WHERE token_hash = ?",
                (token_hash,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read the refresh tokens: {exc}", path=self.where) from exc
        if row is None:
            return None
        th, family, subject, roles, expires_at, spent, revoked = row
        listed = tuple(json.loads(roles))
        return Grant(th, family, subject, listed, expires_at, bool(spent), bool(revoked))

    def insert(self, grant: Grant, now: float) -> None:
        with self._write("keep the refresh token"):
            self._insert(grant)
            self._db.execute(
                "DELETE FROM refresh_grants WHERE subject = ? AND family NOT IN"
                " (SELECT family FROM refresh_grants WHERE subject = ?"
                " GROUP BY family ORDER BY MAX(rowid) DESC LIMIT ?)",
                (grant.subject, grant.subject, self.families),
            )
            self._prune(now)

    def rotate(self, rotation: Rotate, now: float) -> bool:
        """Spend the old grant and keep the new one; False (nothing written) when the old one
        was spent or revoked meanwhile."""
        with self._write("rotate the refresh token"):
            spent = self._db.execute(
                "UPDATE refresh_grants SET spent = 1"
                " WHERE token_hash = ? AND spent = 0 AND revoked = 0",
                (rotation.spent,),
            ).rowcount
            if spent != 1:
                return False
            self._insert(rotation.grant)
            self._db.execute(
                "DELETE FROM refresh_grants WHERE rowid IN (SELECT rowid FROM refresh_grants"
                " WHERE family = ? AND spent = 1 ORDER BY rowid DESC LIMIT -1 OFFSET ?)",
                (rotation.grant.family, self.spent),
            )
            self._prune(now)
        return True

    def refresh(self, raw: str, raw_next: str, now: float, lifetime: float) -> Grant:
        """Spend the refresh token ``raw`` for ``raw_next`` and return the new grant: one
        presentation, decided by ``refresh.rotation.redeem`` and written here. A spent
        token revokes its family and is ``RefreshTokenReused``."""
        step = redeem(self.find(hash_token(raw)), raw_next, now, lifetime)
        if isinstance(step, Rotate) and self.rotate(step, now):
            return step.grant
        self.revoke(step.family if isinstance(step, Reuse) else step.grant.family)
        raise RefreshTokenReused(
            "the refresh token was used already: every token of its family is revoked",
            path="refreshToken",
        )

    def revoke(self, family: str) -> None:
        with self._write("revoke the token family"):
            self._db.execute("UPDATE refresh_grants SET revoked = 1 WHERE family = ?", (family,))

    def close(self) -> None:
        self._db.close()

    def _insert(self, grant: Grant) -> None:
        self._db.execute(
            "INSERT INTO refresh_grants (token_hash, family, subject, roles, expires_at,"
            " spent, revoked) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                grant.token_hash,
                grant.family,
                grant.subject,
                json.dumps(list(grant.roles)),
                grant.expires_at,
                int(grant.spent),
                int(grant.revoked),
            ),
        )

    def _prune(self, now: float) -> None:
        self._db.execute(
            "DELETE FROM refresh_grants WHERE rowid IN"
            " (SELECT rowid FROM refresh_grants WHERE expires_at <= ? LIMIT ?)",
            (now, PRUNE_BATCH),
        )

    def _write(self, what: str) -> Transaction:
        return Transaction(self._db, what, self.path)
