"""Members and frames of shared documents this node is still loading from the cluster.

With documents held by interest (``cluster/holding.py``) a member may join a document the node
does not hold yet. It waits here, with its framing, until the load ends: then it gets the whole
document and its frames are taken in the order they came (a write is never checked against a
partial copy). The wait is bounded twice: by the load timeout (the holder fails the load) and
by :data:`MAX_PARKED_FRAMES` per member.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from octosync.errors import DocumentUnavailable
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtSync

MAX_PARKED_FRAMES = 256
"""Frames one member may send while its document loads; past it the member is reset."""


@dataclass(slots=True)
class Parked:
    """One member waiting for its document."""

    conn: ConnId
    stream: str
    framing: object
    """The plane's ``Framing`` of the member (kept as given)."""
    frames: list[CrdtSync] = field(default_factory=list)


class Parking:
    """Who waits for which document's load."""

    def __init__(self) -> None:
        self._by_conn: dict[ConnId, Parked] = {}

    def __len__(self) -> int:
        return len(self._by_conn)

    def __contains__(self, conn: object) -> bool:
        return conn in self._by_conn

    def member(self, conn: ConnId, stream: str, framing: object) -> None:
        """``conn`` joined ``stream`` while it loads (again: its new framing is kept)."""
        parked = self._by_conn.get(conn)
        if parked is None:
            self._by_conn[conn] = Parked(conn, stream, framing)
        else:
            parked.framing = framing

    def frame(self, conn: ConnId, stream: str, sync: CrdtSync) -> None:
        """A frame of a member whose document loads: kept, in order, up to the bound."""
        parked = self._by_conn.get(conn)
        if parked is None:
            parked = self._by_conn[conn] = Parked(conn, stream, None)
        if len(parked.frames) >= MAX_PARKED_FRAMES:
            raise DocumentUnavailable(
                f"document {stream!r} is still loading and {MAX_PARKED_FRAMES} frames wait for "
                "it; send again once it is loaded",
                path="ops",
            )
        parked.frames.append(sync)

    def drop(self, conn: ConnId) -> None:
        self._by_conn.pop(conn, None)

    def take(self, stream: str) -> list[Parked]:
        """Every member waiting for ``stream``, in the order they came; they wait no more."""
        out = [p for p in self._by_conn.values() if p.stream == stream]
        for p in out:
            del self._by_conn[p.conn]
        return out
