"""Moves the hub's outboxes onto sockets: one write per connection per loop turn, never waiting.

The hub calls ``wake(conn)``; the first wake of a loop turn schedules one flush, which runs
as the first callback of the next loop iteration (before any new input is read) and writes
each woken connection's backlog as a single ``transport.write``. The bytes are already framed
and usually the very object every caught-up subscriber of the same view gets. A connection
whose socket buffer is above ``high_water`` is skipped: its backlog stays in the hub's bounded
log, which resets it to a fresh snapshot if it falls too far behind. Nobody else ever waits.
A connection whose drain or write fails is handed to ``on_fault`` and detached; every other
woken connection of the same flush is still written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from octosync.errors import InternalError, OctosyncError
from octosync.hub import Hub

FaultHandler = Callable[[int, OctosyncError], None]


def writable(t: asyncio.BaseTransport | None) -> asyncio.WriteTransport | None:
    """``t`` if bytes can still be written to it, else None: the one "still open?" test for
    every server write (flusher, sessions' own frames, relays)."""
    if isinstance(t, asyncio.WriteTransport) and not t.is_closing():
        return t
    return None


@dataclass(eq=False, slots=True)
class _Link:
    transport: asyncio.WriteTransport | asyncio.BaseTransport
    on_written: Callable[[int, int], None]
    closed: bool = False


@dataclass(slots=True)
class FlushStats:
    writes: int = 0
    frames: int = 0
    bytes: int = 0
    deferred: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Flusher:
    def __init__(
        self,
        hub: Hub,
        *,
        high_water: int = 64 * 1024,
        retry_interval: float = 0.01,
        on_fault: FaultHandler | None = None,
    ) -> None:
        self.hub = hub
        self.on_fault: FaultHandler = on_fault or (lambda _c, _e: None)
        self.high_water = high_water
        self.retry_interval = retry_interval
        self.stats = FlushStats()
        self._links: dict[int, _Link] = {}
        self._dirty: set[int] = set()
        self._blocked: set[int] = set()
        self._scheduled = False
        self._retry: asyncio.TimerHandle | None = None

    def attach(
        self,
        conn: int,
        transport: asyncio.BaseTransport,
        on_written: Callable[[int, int], None] | None = None,
    ) -> None:
        self._links[conn] = _Link(transport, on_written or (lambda _f, _b: None))

    def detach(self, conn: int) -> None:
        self._links.pop(conn, None)
        self._dirty.discard(conn)
        self._blocked.discard(conn)

    def wake(self, conn: int) -> None:
        """Called by the hub whenever ``conn`` has something to take."""
        self._dirty.add(conn)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def flush_now(self, conn: int) -> bool:
        """Write ``conn``'s outbox immediately (before closing it, for instance)."""
        self._dirty.discard(conn)
        return self._write(conn, force=True)

    def send_now(self, conn: int, data: bytes) -> bool:
        """Write ``data`` to ``conn``'s socket at once, when nothing is queued before it (in
        the hub, or a deferred flush) and its socket is below the high-water mark; False (not
        written: queue it instead) otherwise. A fan-out to many connections written this way
        skips each one's outbox, wake and drain: with a thousand readers that bookkeeping was
        as costly as the socket writes themselves."""
        if conn in self._dirty or conn in self._blocked:
            return False
        link = self._links.get(conn)
        if link is None:
            return False
        t = writable(link.transport)
        if t is None or t.get_write_buffer_size() > self.high_water or not self.hub.quiet(conn):
            return False
        try:
            t.write(data)
        except Exception as exc:
            link.closed = True
            self._links.pop(conn, None)
            self.on_fault(conn, InternalError(f"writing to this connection failed: {exc!r}"))
            return True  # reset: nothing more goes to it
        self.hub.count_out(1, len(data))
        self.stats.writes += 1
        self.stats.frames += 1
        self.stats.bytes += len(data)
        link.on_written(1, len(data))
        return True

    def pending(self) -> int:
        """Bytes still buffered in transports plus frames still in hub outboxes."""
        total = self.hub.outbox_depth()
        for link in self._links.values():
            t = writable(link.transport)
            if t is not None:
                total += t.get_write_buffer_size()
        return total

    def flush_all(self) -> None:
        for conn in list(self._links):
            self._write(conn, force=True)

    def _flush(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for conn in dirty:
            self._write(conn, force=False)
        if self._blocked and self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(self.retry_interval, self._unblock)

    def _unblock(self) -> None:
        self._retry = None
        blocked, self._blocked = self._blocked, set()
        self._dirty |= blocked
        if not self._scheduled:
            self._scheduled = True
            self._flush()

    def _write(self, conn: int, *, force: bool) -> bool:
        link = self._links.get(conn)
        if link is None:
            return False
        t = writable(link.transport)
        if t is None:
            return False
        if not force and t.get_write_buffer_size() > self.high_water:
            self._blocked.add(conn)
            self.stats.deferred += 1
            return False
        try:
            data, frames = self.hub.take_bytes(conn)
            if not frames:
                return True
            t.write(data)
        except Exception as exc:
            # Only this connection is affected: it is reset; the caller goes on with the others.
            link.closed = True
            self._links.pop(conn, None)
            err = (
                exc
                if isinstance(exc, OctosyncError)
                else InternalError(f"writing to this connection failed: {exc!r}")
            )
            self.on_fault(conn, err)
            return False
        self.stats.writes += 1
        self.stats.frames += frames
        self.stats.bytes += len(data)
        link.on_written(frames, len(data))
        return True
