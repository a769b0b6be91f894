"""Connections and their grants: who is connected, in which view, allowed to do what."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from octosync.errors import Forbidden, OctosyncError
from octosync.hub.frame_log import FrameLog
from octosync.hub.outbox import Outbox, OutboxLimits
from octosync.hub.streams import Face
from octosync.hub.types import Action, AllowAll, ConnId, Grants, StreamId, ViewKey


@dataclass(eq=False, slots=True)
class Connection:
    id: ConnId
    view: ViewKey
    grants: Grants
    wake: Callable[[ConnId], None]
    outbox: Outbox
    face: Face
    subscriptions: set[StreamId] = field(default_factory=set)
    pending_snapshot: set[StreamId] = field(default_factory=set)
    produces: set[StreamId] = field(default_factory=set)
    logs: dict[StreamId, FrameLog[ConnId]] = field(default_factory=dict)
    """The log of each subscribed stream in this connection's view (a lookup without hashing
    the view on every drain)."""
    fault: OctosyncError | None = None
    """Set when serving this connection failed; its next drain raises it (and nobody else's)."""
    remote_ops: bool = False
    """A producer that takes ``RemoteOp`` requests (with the writer's identity) and answers
    them; otherwise writes reach it as plain ``cell_set`` deltas."""

    def require(self, stream: StreamId, action: Action) -> None:
        """``Forbidden`` unless the connection's grants allow ``action`` on ``stream``."""
        require(self.grants, stream, action)


def require(grants: Grants, stream: StreamId, action: Action) -> None:
    """``Forbidden`` unless ``grants`` allow ``action`` on ``stream``."""
    if not grants.allows(stream, action):
        raise Forbidden(f"not granted {action} on stream {stream!r}")


class Connections:
    def __init__(self, outbox: OutboxLimits) -> None:
        self._outbox = outbox
        self._by_id: dict[ConnId, Connection] = {}

    def add(
        self,
        conn: ConnId,
        view: ViewKey,
        grants: Grants | None,
        wake: Callable[[ConnId], None] | None,
    ) -> Connection:
        if conn in self._by_id:
            raise ValueError(f"connection {conn} is already registered")
        c = Connection(
            conn,
            view,
            grants or AllowAll(),
            wake or (lambda _c: None),
            Outbox(self._outbox),
            view.face,
        )
        self._by_id[conn] = c
        return c

    def get(self, conn: ConnId) -> Connection:
        try:
            return self._by_id[conn]
        except KeyError:
            raise ValueError(f"unknown connection {conn}") from None

    def find(self, conn: ConnId) -> Connection | None:
        return self._by_id.get(conn)

    def pop(self, conn: ConnId) -> Connection | None:
        return self._by_id.pop(conn, None)

    def __iter__(self) -> Iterator[Connection]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)
