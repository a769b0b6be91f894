"""Work a TopGun request needs done off the event loop (SQL, journal reads), as the core
hands it to the server: the core stays sans-I/O, the server runs ``run`` on a worker thread
and sends what it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_RUNNING = 2
"""Jobs a server runs at once; beyond that each job's ``busy`` answer goes at once."""


@dataclass(frozen=True, slots=True)
class OffLoop:
    conn: int
    run: Callable[[], list[bytes]]
    """On a worker thread: the encoded messages for ``conn``, in order."""
    busy: Callable[[], list[bytes]]
    """On the loop, when :data:`MAX_RUNNING` jobs run already: the messages instead."""
    after: Callable[[], None] | None = None
    """On the loop, once the job's messages went out (or it was turned away, or failed)."""
