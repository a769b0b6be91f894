"""Which TopGun maps a node holds, and which client messages wait for a map's load (sans-I/O).

Maps held by interest use the same interest table as shared documents (``cluster/holding.py``,
:class:`~octosync.cluster.holding.Holdings`): a map is a held thing like a document. What is
particular to maps is who counts as a member and what waits:

- **members**: a connection that names a map in any message (a write, a query, a sync, a
  search; :func:`maps_named`) is a member of it until it closes. TopGun clients name a map
  once and keep using it (live queries, Merkle sync on reconnect), so membership follows the
  connection, not the request. The last member closing starts the map's idle timer.
- **waiting**: a message that names a map not loaded yet waits, and so does every later
  message of the same connection (its replies stay in the order it sent them), until every
  map it names is loaded: a write is never checked or applied against a partial copy.
- **bounds**: at most ``max_parked`` messages wait per connection and a connection is a member
  of at most ``max_maps`` maps; past either its message is refused with a typed error and
  nothing of it is taken, so one client cannot make a node load everything.
- **load failure**: a load past its timeout fails every connection waiting for that map
  (:class:`Refuse`: the connection is reset, its client sends again once it reconnects); a
  refused connection leaves every map it used and its waiting messages are dropped.

The I/O side performs the loads and releases and hands out :class:`Go` messages to the
session that parked them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from octosync.cluster.holding import Holdings, Load, Release
from octosync.errors import DocumentUnavailable, LimitExceeded, OctosyncError
from octosync.topgun.durable import is_reserved
from octosync.topgun.sql import maps_read
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq

M = TypeVar("M")

MAX_PARKED = 256
"""Messages one connection may send while a map it named loads."""
MAX_MAPS = 1024
"""Maps one connection may be a member of (each may cost the node a load)."""


def maps_named(message: tg.Message) -> tuple[str, ...]:
    """The maps a TopGun message reads or writes, sorted, reserved maps left out (a client may
    not name them; the core refuses it). Messages of every kind carry the name as ``map_name``
    on themselves or on their payload; a batch of ops names each op's map, a SQL query the
    tables it reads."""
    names: set[str] = set()
    if isinstance(message, tg.OpBatch):
        names.update(op.map_name for op in message.payload.ops)
    elif isinstance(message, rq.SqlQuery):
        names.update(maps_read(message.payload.sql))
    else:
        for part in (message, getattr(message, "payload", None)):
            name = getattr(part, "map_name", None)
            if isinstance(name, str):
                names.add(name)
    return tuple(sorted(n for n in names if not is_reserved(n)))


@dataclass(frozen=True, slots=True)
class Go(Generic[M]):
    """A message that waited: its maps are loaded, the session handles it now."""

    conn: int
    message: M


@dataclass(frozen=True, slots=True)
class Refuse:
    """A connection to reset: a map it waited for failed to load (its messages are dropped)."""

    conn: int
    error: OctosyncError


@dataclass(frozen=True, slots=True)
class Taken:
    """What :meth:`MapGate.take` decided: loads to start, and whether the message goes now."""

    loads: tuple[Load, ...]
    now: bool


class MapGate(Generic[M]):
    """Members of maps and the messages waiting for their loads, over one interest table."""

    def __init__(
        self,
        holdings: Holdings,
        names: Callable[[M], Sequence[str]],
        *,
        max_parked: int = MAX_PARKED,
        max_maps: int = MAX_MAPS,
    ) -> None:
        self.holdings = holdings
        self.names = names
        self.max_parked = max_parked
        self.max_maps = max_maps
        self._uses: dict[int, set[str]] = {}
        self._parked: dict[int, deque[tuple[M, tuple[str, ...]]]] = {}

    def uses(self, conn: int) -> frozenset[str]:
        return frozenset(self._uses.get(conn, ()))

    def parked(self, conn: int) -> int:
        return len(self._parked.get(conn, ()))

    def take(self, conn: int, message: M) -> Taken:
        """A message of ``conn``: it joins the maps it names (loads for those not held here)
        and goes now, or waits behind a load or an earlier waiting message. Refused (raises,
        nothing taken) past ``max_maps`` or ``max_parked``."""
        names = tuple(self.names(message))
        uses = self._uses.get(conn, set())
        new = [n for n in names if n not in uses]
        if new and len(uses) + len(new) > self.max_maps:
            raise LimitExceeded(
                f"a connection may use at most {self.max_maps} maps", path="payload.mapName"
            )
        waiting = self._parked.get(conn)
        holdings = self.holdings
        goes = not waiting and all(holdings.ready(n) for n in names)
        if not goes and len(waiting or ()) >= self.max_parked:
            raise DocumentUnavailable(
                f"{self.max_parked} messages wait for a map's load; send again once it is loaded",
                path="payload.mapName",
            )
        loads: list[Load] = []
        if new:
            uses = self._uses.setdefault(conn, uses)
            for name in new:
                uses.add(name)
                load = holdings.joined(conn, name)
                if load is not None:
                    loads.append(load)
        if goes:
            return Taken(tuple(loads), True)
        self._parked.setdefault(conn, deque()).append((message, names))
        return Taken(tuple(loads), False)

    def loaded(self, name: str) -> list[Go[M]]:
        """The load of ``name`` caught up: the messages that may go now, each connection's in
        the order it sent them (a connection's first message still waiting for another map
        holds the ones behind it)."""
        if not self.holdings.loaded(name):
            return []
        out: list[Go[M]] = []
        for conn in sorted(self._parked):
            waiting = self._parked[conn]
            while waiting and all(self.holdings.ready(n) for n in waiting[0][1]):
                out.append(Go(conn, waiting.popleft()[0]))
            if not waiting:
                del self._parked[conn]
        return out

    def failed(self, name: str) -> tuple[list[Release], list[Refuse]]:
        """The load of ``name`` could not be done: let it go and refuse who waited for it."""
        release = self.holdings.failed(name)
        return self._released([] if release is None else [release])

    def due(
        self, busy: Callable[[str], bool] = lambda _name: False
    ) -> tuple[list[Release], list[Refuse]]:
        """What the clock decides now (``Holdings.due``), with the connections a failed load
        refuses."""
        return self._released(self.holdings.due(busy))

    def closed(self, conn: int) -> None:
        """``conn`` is gone: it leaves every map it used; its waiting messages are dropped."""
        self._parked.pop(conn, None)
        for name in sorted(self._uses.pop(conn, ())):
            self.holdings.left(conn, name)

    def _released(self, releases: list[Release]) -> tuple[list[Release], list[Refuse]]:
        refused: list[Refuse] = []
        for release in releases:
            if not release.failed:
                continue  # idle: no member, so nothing waits for it
            error = DocumentUnavailable(
                f"map {release.name!r} could not be loaded in time", path="payload.mapName"
            )
            for conn in sorted(c for c, uses in self._uses.items() if release.name in uses):
                refused.append(Refuse(conn, error))
                self.closed(conn)  # it is reset: it leaves its other maps too
        return releases, refused
