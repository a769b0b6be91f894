"""Connection caps and the request deadline, applied before aiohttp sees a connection.

Every accepted socket is counted per client address and in total. Past a cap the socket gets
one ``HTTP 503`` with an ``Overloaded`` body and is closed at once, so descriptors never run
out and clients that behave are still served. A connection that has not sent a complete
HTTP request within ``request_timeout`` is closed (slow or silent clients hold nothing). The
total cap defaults to the process's descriptor limit less a reserve for the journal, logs and
the listening sockets.
"""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Callable
from typing import Any

from octosync.errors import Overloaded
from octosync.server.flusher import writable

DESCRIPTOR_RESERVE = 64


def default_max_connections(configured: int | None) -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    by_fds = max(1, soft - DESCRIPTOR_RESERVE) if soft != resource.RLIM_INFINITY else 1 << 20
    return by_fds if configured is None else min(configured, by_fds)


class ConnectionGuard:
    """Counts live connections per address and in total (sans-I/O: no sockets in here)."""

    def __init__(self, *, max_total: int, max_per_address: int) -> None:
        if max_total <= 0 or max_per_address <= 0:
            raise ValueError("connection caps must be positive")
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.total = 0
        self._by_address: dict[str, int] = {}
        self.refused = 0

    def admit(self, address: str) -> Overloaded | None:
        """Count a new connection from ``address``, or say why it is refused."""
        if self.total >= self.max_total:
            self.refused += 1
            return Overloaded(f"the server holds its maximum of {self.max_total} connections")
        held = self._by_address.get(address, 0)
        if held >= self.max_per_address:
            self.refused += 1
            return Overloaded(f"{address} already holds {held} connections (the limit per address)")
        self.total += 1
        self._by_address[address] = held + 1
        return None

    def release(self, address: str) -> None:
        held = self._by_address.get(address, 0)
        if held <= 1:
            self._by_address.pop(address, None)
        else:
            self._by_address[address] = held - 1
        self.total = max(0, self.total - 1)

    def held_by(self, address: str) -> int:
        return self._by_address.get(address, 0)


def peer_address(transport: asyncio.BaseTransport) -> str:
    peer: Any = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "?"


def overloaded_response(err: Overloaded) -> bytes:
    body = json.dumps({"code": err.name, "message": err.message}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class GuardedProtocol(asyncio.Protocol):
    """Wraps aiohttp's per-connection protocol: admission, the request deadline, release."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        guard: ConnectionGuard,
        tracker: dict[asyncio.BaseTransport, Any],
        request_timeout: float,
        on_deadline: Callable[[], None],
    ) -> None:
        self.inner = inner
        self.guard = guard
        self.tracker = tracker
        self.request_timeout = request_timeout
        self.on_deadline = on_deadline
        self.address: str | None = None
        self.transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        address = peer_address(transport)
        refused = self.guard.admit(address)
        if refused is not None:
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(overloaded_response(refused))
            transport.close()
            return
        self.address = address
        self.transport = transport
        self.tracker[transport] = self
        self._timer = asyncio.get_running_loop().call_later(self.request_timeout, self._deadline)
        self.inner.connection_made(transport)

    def request_started(self) -> None:
        """A complete request arrived in time: the deadline no longer applies."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline(self) -> None:
        self._timer = None
        transport = writable(self.transport)
        if transport is not None:
            self.on_deadline()
            transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.address is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.address is not None else None

    def pause_writing(self) -> None:
        if self.address is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.address is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.address is None:
            return
        self.request_started()
        if self.transport is not None:
            self.tracker.pop(self.transport, None)
        self.guard.release(self.address)
        self.address = None
        self.inner.connection_lost(exc)
