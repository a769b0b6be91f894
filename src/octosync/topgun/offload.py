"""Work a TopGun request needs done off the event loop (SQL, journal reads), as the core
hands it to the server: the core stays sans-I/O, the server runs ``run`` on a worker thread,
encodes what it returns there and sends it. A job with a time bound (``seconds``) has
``interrupt`` called by the server, again and again, from then until it returns: the core
starts no timer of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from octosync.wire import topgun as tg

MAX_RUNNING = 2
"""Jobs a server runs at once; beyond that each job's ``busy`` answer goes at once."""


@dataclass(frozen=True, slots=True)
class OffLoop:
    conn: int
    run: Callable[[], list[tg.Message]]
    """On a worker thread: the messages for ``conn``, in order."""
    busy: Callable[[], list[tg.Message]]
    """On the loop, when :data:`MAX_RUNNING` jobs run already: the messages instead."""
    after: Callable[[], None] | None = None
    """On the loop, once the job's messages went out (or it was turned away, or failed)."""
    seconds: float | None = None
    """How long ``run`` may take before the server calls ``interrupt`` (None: unbounded)."""
    interrupt: Callable[[], None] | None = None
    """Thread-safe: ends a running ``run`` early (it then returns its own refusal)."""
