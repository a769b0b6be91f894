"""Durability acks (``OutboxAck``): a producer that asked learns how far its stream is
journaled, once per drain of commits, the furthest epoch only."""

from __future__ import annotations

from collections.abc import Callable

DurableListener = Callable[[object, int], None]
"""Told ``(stream, epoch)`` once a producer's frames are journaled that far."""


class DurableAcks:
    def __init__(self) -> None:
        self.listeners: dict[int, DurableListener] = {}
        """Producers that asked, by connection (a session adds and removes itself)."""
        self._due: dict[int, tuple[object, int]] = {}

    def frame_durable(self, conn: int, stream: object, epoch: int) -> None:
        """A producer's frame is committed: its ack goes out after this drain."""
        due = self._due.get(conn)
        if due is None or due[1] < epoch:
            self._due[conn] = (stream, epoch)

    def send(self) -> None:
        """After each drain of commits: one ack per producer, the furthest."""
        due, self._due = self._due, {}
        for conn, (stream, epoch) in due.items():
            listener = self.listeners.get(conn)
            if listener is not None:
                listener(stream, epoch)
