"""The one commit path's interpreter: refuse up front, journal, then the after-commit effects.

Every face hands its writes here as ``store.commit_path`` values (``Ask``, ``Commit``); this
is the only code that submits them to the journal's writer and the only code that decides
what a commit's outcome does (its docstring's picture is the interface). ``refuse`` asks the
storage rules (``store.storage_rules.rules_for``) in order; ``submit`` queues the records
without waiting and, on the event loop, in commit order, runs each commit's ``after`` effects
once it succeeded, or its ``failed`` answer (by default: reset the writer's connection, which,
told nothing, resends) when it did not.

Commits come back through one inbox: the writer thread wakes the loop once for all the
submissions one commit settles, not once each (a wake-up is a syscall and a loop turn, and
each turn flushes a smaller fan-out). ``drained`` runs after each drain (the hub's
durability acks: one per producer per drain, the furthest).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Callable, Sequence

from octosync.errors import InternalError, OctosyncError
from octosync.store.commit_path import WRITE, Ask, Commit, StorageRule, refuse
from octosync.store.journal import GroupCommitWriter

Fault = Callable[[int, OctosyncError], None]


class Committer:
    """Carries out ``Commit``s for every face (``store.commit_path.CommitPath``)."""

    def __init__(
        self,
        writer: GroupCommitWriter | None,
        rules: Sequence[StorageRule],
        fault: Fault,
        drained: Callable[[], None] | None = None,
    ) -> None:
        self.writer = writer
        self.rules = tuple(rules)
        self._fault = fault
        self._drained = drained
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: deque[tuple[Commit, concurrent.futures.Future[list[int]]]] = deque()
        self._drain_due = False

    @property
    def journaled(self) -> bool:
        return self.writer is not None

    def refuse(self, ask: Ask = WRITE) -> None:
        """The storage rules, in order (none without a journal: nothing is written)."""
        if self.writer is not None:
            refuse(self.rules, ask)

    def submit(self, commit: Commit) -> None:
        """Queue ``commit``'s records (never waiting); its outcome comes back on the loop.
        Without a journal its ``after`` effects run now."""
        writer = self.writer
        if writer is None:
            for effect in commit.after:
                effect()
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        future = writer.submit_encoded(commit.records, block=False)
        future.add_done_callback(lambda f: self._settled(commit, f))

    def _settled(self, commit: Commit, f: concurrent.futures.Future[list[int]]) -> None:
        """On the writer thread: queue the outcome; wake the loop unless a wake-up is due."""
        self._inbox.append((commit, f))
        if not self._drain_due:
            self._drain_due = True
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """On the loop, in commit order: each commit's ``after``, or its failure answered.
        (The flag drops before the inbox is read, so an outcome queued meanwhile is read now
        or wakes the loop again.)"""
        self._drain_due = False
        inbox = self._inbox
        while inbox:
            commit, f = inbox.popleft()
            exc = f.exception()
            if exc is None:
                for effect in commit.after:
                    effect()
                continue
            err = (
                exc
                if isinstance(exc, OctosyncError)
                else InternalError(f"journal commit failed: {exc}")
            )
            if commit.failed is not None:
                commit.failed(err)
            else:
                self._fault(commit.conn, err)
        if self._drained is not None:
            self._drained()
