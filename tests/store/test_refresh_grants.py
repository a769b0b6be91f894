"""Refresh grants in their SQLite file: rotation and reuse detection as a state machine
over the real file, reopened (a restart) between steps; a write that cannot be stored fails."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from octosync.errors import RefreshTokenRefused, RefreshTokenReused, StorageError
from octosync.refresh.rotation import hash_token, start_family
from octosync.store.refresh_grants import FILE_NAME, RefreshGrants

LIFETIME = 100.0


@dataclass
class Issued:
    family: str
    subject: str
    expires_at: float
    spent: bool = False


class RefreshMachine(RuleBasedStateMachine):
    """The model: every token handed out, its family and whether it was spent; families
    revoked. A token is honoured iff it is unspent, unexpired and its family is not revoked."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.grants = RefreshGrants(self.dir)
        self.now = 1_000.0
        self.counter = 0
        self.tokens: dict[str, Issued] = {}
        self.revoked: set[str] = set()

    def teardown(self) -> None:
        self.grants.close()
        shutil.rmtree(self.dir)

    def _raw(self) -> str:
        self.counter += 1
        return f"token-{self.counter:06d}"

    @rule(subject=st.sampled_from(["ann", "bo"]))
    def exchange(self, subject: str) -> None:
        raw = self._raw()
        grant = start_family(subject, ("writer",), raw, self.now, LIFETIME)
        self.grants.insert(grant, self.now)
        self.tokens[raw] = Issued(grant.family, subject, grant.expires_at)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def present(self, data: st.DataObject) -> None:
        raw = data.draw(st.sampled_from(sorted(self.tokens)))
        held = self.tokens[raw]
        nxt = self._raw()
        if self.now >= held.expires_at:  # pruned by a write since, or not yet
            with pytest.raises(RefreshTokenRefused, match=r"expired|unknown"):
                self.grants.refresh(raw, nxt, self.now, LIFETIME)
        elif held.family in self.revoked:
            with pytest.raises(RefreshTokenRefused, match="revoked"):
                self.grants.refresh(raw, nxt, self.now, LIFETIME)
        elif held.spent:
            with pytest.raises(RefreshTokenReused):
                self.grants.refresh(raw, nxt, self.now, LIFETIME)
            self.revoked.add(held.family)
        else:
            grant = self.grants.refresh(raw, nxt, self.now, LIFETIME)
            assert (grant.family, grant.subject, grant.roles) == (
                held.family,
                held.subject,
                ("writer",),
            )
            held.spent = True
            self.tokens[nxt] = Issued(held.family, held.subject, grant.expires_at)

    @rule()
    def present_unknown(self) -> None:
        with pytest.raises(RefreshTokenRefused, match="unknown"):
            self.grants.refresh("never-issued", self._raw(), self.now, LIFETIME)

    @rule(seconds=st.sampled_from([1.0, 30.0, 99.0, 150.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def restart(self) -> None:
        self.grants.close()
        self.grants = RefreshGrants(self.dir)

    @invariant()
    def stored_as_hashes_only(self) -> None:
        for raw, held in self.tokens.items():
            found = self.grants.find(hash_token(raw))
            if found is None:  # pruned: only once it expired
                assert self.now >= held.expires_at
                continue
            assert found.family == held.family
            assert found.spent == held.spent
            assert found.revoked == (held.family in self.revoked)

    @invariant()
    def one_live_token_per_family(self) -> None:
        live: dict[str, int] = {}
        for held in self.tokens.values():
            alive = not held.spent and self.now < held.expires_at
            if alive and held.family not in self.revoked:
                live[held.family] = live.get(held.family, 0) + 1
        assert all(n == 1 for n in live.values())


TestRefreshMachine = RefreshMachine.TestCase
TestRefreshMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


def test_the_file_holds_no_raw_token(tmp_path: Path) -> None:
    grants = RefreshGrants(tmp_path)
    grants.insert(start_family("ann", (), "raw-secret-token", 0.0, LIFETIME), 0.0)
    grants.close()
    assert b"raw-secret-token" not in (tmp_path / FILE_NAME).read_bytes()
    assert grants_with_hash(tmp_path, hash_token("raw-secret-token")) == 1


def grants_with_hash(data: Path, digest: str) -> int:
    db = sqlite3.connect(data / FILE_NAME)
    try:
        query = "SELECT count(*) FROM refresh_grants WHERE token_hash = ?"
        return int(db.execute(query, (digest,)).fetchone()[0])
    finally:
        db.close()


def test_a_write_that_cannot_be_stored_fails_and_keeps_nothing(tmp_path: Path) -> None:
    grants = RefreshGrants(tmp_path)
    big = tuple(f"role-{i}-" + "x" * 200 for i in range(64))  # a grant of several pages
    grants.insert(start_family("ann", big, "first", 0.0, LIFETIME), 0.0)
    pages = grants._db.execute("PRAGMA page_count").fetchone()[0]
    grants._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
    with pytest.raises(StorageError, match="cannot keep the refresh token"):
        grants.insert(start_family("bo", big, "second", 0.0, LIFETIME), 0.0)
    with pytest.raises(StorageError, match="cannot rotate"):
        grants.refresh("first", "third", 0.0, LIFETIME)
    assert grants.find(hash_token("second")) is None
    first = grants.find(hash_token("first"))
    assert first is not None
    assert not first.spent  # the failed rotation spent nothing: the token still works
    grants.close()


def test_a_subject_keeps_its_newest_families_and_a_family_its_newest_spent_tokens(
    tmp_path: Path,
) -> None:
    grants = RefreshGrants(tmp_path, families=2, spent=3)
    for raw in ("a", "b", "c"):  # three sign-ins of one subject
        grants.insert(start_family("ann", (), raw, 0.0, LIFETIME), 0.0)
    grants.insert(start_family("bo", (), "other", 0.0, LIFETIME), 0.0)  # not ann's
    assert grants.find(hash_token("a")) is None  # the oldest family went
    assert grants.find(hash_token("b")) is not None
    assert grants.find(hash_token("other")) is not None
    held = "c"
    for n in range(5):
        grants.refresh(held, f"c{n}", 0.0, LIFETIME)
        held = f"c{n}"
    spent = ["c", "c0", "c1", "c2", "c3"]
    kept = [raw for raw in spent if grants.find(hash_token(raw)) is not None]
    assert kept == ["c1", "c2", "c3"]  # the newest three spent, for reuse detection
    with pytest.raises(RefreshTokenRefused, match="unknown"):
        grants.refresh("c", "x", 0.0, LIFETIME)  # too old to tell from a guess: refused
    assert grants.refresh("c4", "c5", 0.0, LIFETIME).family == hash_token("c")
    grants.close()
