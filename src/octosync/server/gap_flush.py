"""Fan-outs at most once per gap: an idle server sends at once, a busy one batches.

Each fan-out costs a write per receiver whatever it carries, so a face that fans out (TopGun's
events, the CRDT plane's ops) sends what is due at the end of this event-loop turn, or, when
its last fan-out went out less than ``gap`` seconds ago, once that gap has passed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class GapFlush:
    """Runs ``flush`` soon, never twice within ``gap`` seconds."""

    __slots__ = ("_due", "_flush", "_last", "gap")

    def __init__(self, flush: Callable[[], None], gap: float) -> None:
        self._flush = flush
        self.gap = gap
        self._due = False
        self._last = float("-inf")

    def soon(self) -> None:
        """Schedule ``flush`` (once, however often this is called before it runs)."""
        if self._due:
            return
        self._due = True
        loop = asyncio.get_running_loop()
        wait = self._last + self.gap - loop.time()
        if wait > 0:
            loop.call_later(wait, self._run)
        else:
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._due = False
        self._last = asyncio.get_running_loop().time()
        self._flush()
