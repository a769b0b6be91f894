"""The server's open connections: who is attached, how bytes reach them now, and how one is
reset; counted per face. The runtime (``server.runtime.Runtime``) is one."""

from __future__ import annotations

import asyncio
from typing import Protocol

from octosync.errors import OctosyncError
from octosync.hub import Hub
from octosync.server.counters import Counters
from octosync.server.flusher import Flusher, writable
from octosync.server.ports import LiveConnection


class HttpConnection(Protocol):
    def request_started(self) -> None: ...


class LiveConnections:
    def __init__(self, hub: Hub, high_water: int) -> None:
        self.high_water = high_water
        self.flusher = Flusher(hub, high_water=high_water, on_fault=self._fault)
        self.counters = Counters()
        self.links: dict[int, LiveConnection] = {}
        self.http_conns: dict[asyncio.BaseTransport, HttpConnection] = {}
        """Open HTTP connections by transport (``server.guard``), to lift their deadline."""

    def wake(self, conn: int) -> None:
        """The hub queued bytes for ``conn``: the flusher writes them this loop turn."""
        self.flusher.wake(conn)

    def attach(self, conn: int, link: LiveConnection) -> None:
        self.links[conn] = link
        self.flusher.attach(conn, link.transport)
        self.counters.faces[link.session_face].connections += 1

    def detach(self, conn: int) -> None:
        link = self.links.pop(conn, None)
        self.flusher.detach(conn)
        if link is not None:
            self.counters.faces[link.session_face].connections -= 1

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """A complete HTTP request arrived on ``transport``: its request deadline is met."""
        conn = None if transport is None else self.http_conns.get(transport)
        if conn is not None:
            conn.request_started()

    def deliver(self, conn: int, *data: bytes) -> None:
        """Write ``data`` (one frame, or its parts in order) to another connection now; a peer
        that cannot keep up is dropped, never waited for."""
        link = self.links.get(conn)
        t = None if link is None else writable(link.transport)
        if link is None or t is None:
            return
        if t.get_write_buffer_size() > self.high_water:
            link.abort()
            return
        for part in data:
            t.write(part)

    def send_now(self, conn: int, data: bytes) -> bool:
        """Write ``data`` to ``conn``'s socket now if nothing is queued before it."""
        return self.flusher.send_now(conn, data)

    def fault(self, conn: int, err: OctosyncError) -> None:
        """Reset one connection with ``err`` (serving it failed outside its own frames)."""
        self._fault(conn, err)

    def _fault(self, conn: int, err: OctosyncError) -> None:
        link = self.links.get(conn)
        if link is not None:
            link.fault(err)
