"""The storage rules: what refuses a write before any face applies it, in order.

Every face asks these through the one commit path (``store.commit_path``,
``server.commit.Committer``), so a rule added here reaches the lazily streams, the shared
documents, TopGun (WebSocket and HTTP), the dataspace and the chain face at once. Adding a
rule is a change to this module only: its class, its place in ``rules_for``, and, when it has
a setting, a field of ``StorageSettings`` (the ``[storage]`` section of the config file,
declared by the field's ``setting(...)``: type, default, range and doc in one place).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from octosync.store.commit_path import WRITE, Ask, Commit, StorageRule, refuse
from octosync.store.journal import GroupCommitWriter


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``[storage]`` key: its range (inclusive) and what it means (``docs/config.md``)."""

    doc: str
    low: float | None = None
    high: float | None = None


def setting(doc: str, low: float | None = None, high: float | None = None) -> dict[str, Setting]:
    """A ``StorageSettings`` field's declaration (``dataclasses.field(metadata=...)``)."""
    return {"setting": Setting(doc, low, high)}


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """The storage rules' settings: the config file's ``[storage]`` section, one field each."""

    min_free_disk_percent: float = field(
        default=1.0,
        metadata=setting(
            "Refuse writes while the data folder's disk has less than this percentage of its "
            "space free (0: never), so the journal never meets a full disk mid-commit.",
            0,
            50,
        ),
    )


class Gate(Protocol):
    """What the rules ask of the journal's writer (``store.journal.GroupCommitWriter``)."""

    def check_writable(self) -> None: ...

    def has_room(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class JournalWritable:
    """``JournalUnavailable`` while commits fail: a write now could not be made durable."""

    writer: Gate

    def check(self, ask: Ask) -> None:
        self.writer.check_writable()


@dataclass(frozen=True, slots=True)
class QueueRoom:
    """The writer's queue is full: refuse rather than make the event loop wait for the disk."""

    writer: Gate

    def check(self, ask: Ask) -> None:
        if ask.room and not self.writer.has_room():
            said = f"; {ask.then}" if ask.then else ""
            raise ask.full(f"the journal writer is behind: its queue is full{said}")


def free_percent(path: Path) -> float:
    """The percentage of ``path``'s file system free to write (``df``'s "Avail" over its size)."""
    fs = os.statvfs(path)
    return 100.0 * fs.f_bavail / fs.f_blocks if fs.f_blocks else 100.0


@dataclass(frozen=True, slots=True)
class DiskFree:
    """Refuse while the data folder's disk has under ``min_percent`` free: a write accepted
    now might be acknowledged in memory and then meet a full disk at its commit. Asked at every
    write (one ``statvfs``, about a microsecond); ``probe`` is injected for tests. A folder that
    cannot be asked refuses nothing here: the journal's own commits report it."""

    data_dir: Path
    min_percent: float
    probe: Callable[[Path], float] = free_percent

    def check(self, ask: Ask) -> None:
        if self.min_percent <= 0:
            return
        try:
            free = self.probe(self.data_dir)
        except OSError:
            return
        if free < self.min_percent:
            said = f"; {ask.then}" if ask.then else ""
            raise ask.full(
                f"the data folder's disk has {free:.2f}% free, under the {self.min_percent:g}% "
                f"kept free{said}",
                path=str(self.data_dir),
            )


def rules_for(
    writer: Gate,
    data_dir: Path,
    settings: StorageSettings,
    probe: Callable[[Path], float] = free_percent,
) -> tuple[StorageRule, ...]:
    """The rules a server with a journal under ``data_dir`` asks, in order."""
    return (
        JournalWritable(writer),
        QueueRoom(writer),
        DiskFree(data_dir, settings.min_free_disk_percent, probe),
    )


class DirectPath:
    """A commit path without an event loop (tools, tests): the rules, then submit; the
    after-commit effects run on the writer's thread once committed (failures are dropped:
    nobody here was told anything)."""

    journaled = True

    def __init__(
        self,
        writer: GroupCommitWriter,
        data_dir: Path | None = None,
        settings: StorageSettings | None = None,
    ) -> None:
        self.writer = writer
        where = writer.journal.path.parent if data_dir is None else data_dir
        self.rules = rules_for(writer, where, settings or StorageSettings())

    def refuse(self, ask: Ask = WRITE) -> None:
        refuse(self.rules, ask)

    def submit(self, commit: Commit) -> None:
        future = self.writer.submit_encoded(commit.records, block=False)
        if commit.after:
            after = commit.after

            def done(f: Future[list[int]]) -> None:
                if f.exception() is None:
                    for effect in after:
                        effect()

            future.add_done_callback(done)
