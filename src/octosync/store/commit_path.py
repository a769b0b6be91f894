"""The one commit path's interface: what a face asks of the journal, as typed values.

Every write a face accepts follows one rule: *refuse up front, journal, then fan out and
acknowledge*. A face's core decides what it wants stored and what must happen once that is
durable; it hands both to the commit path as values, and one interpreter
(``server.commit.Committer``) carries them out::

    a face's core ──> Commit(conn, records, after, failed) ──> the interpreter
                                                                 1. refuse(Ask): the storage
                                                                    rules, in order
                                                                    (``store.storage_rules``)
                                                                 2. journal the records
                                                                 3a. committed: ``after``, in
                                                                     order, on the event loop
                                                                 3b. failed: ``failed(err)``
                                                                     (default: reset ``conn``)

- ``Ask``: how a face words a refusal (the error class for "not now", what the client should
  do) and whether the write takes a place in the writer's queue. ``refuse(ask)`` raises the
  first storage rule's typed error; nothing is applied, nothing acknowledged.
- ``Commit``: the records (encoded and validated by the face, ``store.records``), the
  after-commit effects (fan out, acknowledge, answer: each an ``AfterCommit``, run once, on
  the loop, in commit order, only once the records and everything queued before them are
  committed) and what answers a failure. Without a journal the after-commit effects run at
  once: nothing is waited for.
- A face never submits to the writer itself, so a new storage rule (``store.storage_rules``)
  reaches every face, and a new face gets every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from octosync.errors import OctosyncError, StorageError
from octosync.store.records import EncodedRecord

AfterCommit = Callable[[], None]
"""An effect that must wait for the commit: a fan-out, an acknowledgement, an answer."""

Failed = Callable[[OctosyncError], None]
"""Answers a failed commit (its acknowledgements fail); ``None`` in a ``Commit``: reset the
writer's connection, which, told nothing, resends."""


@dataclass(frozen=True, slots=True)
class Ask:
    """How a face asks the storage rules before it changes anything."""

    full: type[OctosyncError] = StorageError
    """The error a rule raises for "not now, resend later" (a face's own: TopGun's
    ``Overloaded``); a journal whose commits fail is always ``JournalUnavailable``."""
    then: str = ""
    """What the client should do, appended to the refusal ("resend later")."""
    room: bool = True
    """The write takes a place in the writer's queue (False: only the journal's health is
    asked, for work that journals little or may be refused later)."""


WRITE = Ask()
"""A write with the default wording (``StorageError``)."""


@dataclass(frozen=True, slots=True)
class Commit:
    """What a face wants stored, and what must happen once it is (see the module docstring)."""

    conn: int
    """The connection whose write this is (0: the server's own records)."""
    records: Sequence[EncodedRecord]
    """Encoded and validated records; an empty list is a barrier (``after`` waits for
    everything queued before it)."""
    after: tuple[AfterCommit, ...] = ()
    failed: Failed | None = None


class StorageRule(Protocol):
    """One rule that may refuse a write up front (``store.storage_rules``)."""

    def check(self, ask: Ask) -> None:
        """Raise a typed error naming what is wrong (a ``path``) to refuse; return to allow."""
        ...


class CommitPath(Protocol):
    """The interpreter, as a face sees it (``server.commit.Committer``)."""

    @property
    def journaled(self) -> bool:
        """Whether there is a journal at all (without one ``submit`` runs ``after`` at once)."""
        ...

    def refuse(self, ask: Ask = WRITE) -> None:
        """The storage rules, in order: the first that refuses raises its typed error."""
        ...

    def submit(self, commit: Commit) -> None:
        """Journal ``commit.records``; its ``after`` once they are committed, else ``failed``.

        Never waits: ask ``refuse`` first (a full queue raises here, for what was not)."""
        ...


def refuse(rules: Sequence[StorageRule], ask: Ask) -> None:
    """Ask each rule in order; the first refusal is raised."""
    for rule in rules:
        rule.check(ask)
