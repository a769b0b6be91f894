"""Presence and awareness of shared documents, kept by the server and never journaled.

A member of a shared document sets its presence (``NAME/pr/PEER``: alive while its connection
is) and awareness values such as a cursor (``NAME/aw/PEER``: each peer's latest, until its
TTL) as ordinary ``CrdtSync`` ops of its own peer; ``crdt/entries.py`` checks that the entry is
the writer's. This core holds them per document instead of the plane replica: they are not
journaled, not compacted, never in JetStream, and a joining member gets those still live. In a
cluster, other nodes' values come in as those of a remote connection (a negative ``ConnId``,
one per node: ``links/cluster_presence.py``) and live by the same TTL, so a node that dies takes
its members' presence with it within one TTL. Each value expires ``ttl`` after it was last set
(a client sets its presence again before that, its heartbeat); a presence goes the moment its
connection closes. What goes is announced as an op of the same entry holding ``null``, stamped
just above the value it ends, so every reader's last-writer-wins entry ends the same way.

Bounded: a value's bytes, the entries one connection holds and the entries of a document.
Sans-I/O: ``now`` is the caller's monotonic clock (seconds), ``wall_ms`` its wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from octosync.crdt.entries import EPHEMERAL_KINDS, layout_of
from octosync.errors import LimitExceeded
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp, WireStamp

EPHEMERAL = EPHEMERAL_KINDS
"""The entry kinds this core keeps: presence and awareness."""
PRESENCE = "pr"
MAX_VALUE_BYTES = 4096
MAX_PER_CONNECTION = 16
MAX_PER_DOCUMENT = 1024
DEFAULT_TTL = 30.0
NULL = b"null"
MAX_FLOORS = 4096
"""Endings remembered after their value went, so a value stamped below an ending that readers
already hold is not taken (the oldest forgotten first)."""


def is_ephemeral(op: CrdtOp) -> bool:
    layout = layout_of(op)
    return layout is not None and layout.kind.tag in EPHEMERAL


@dataclass(slots=True)
class _Live:
    op: CrdtOp
    conn: ConnId
    expiry: float


def _stamp_after(stamp: WireStamp, wall_ms: int) -> WireStamp:
    if wall_ms > stamp.wall_time:
        return WireStamp(wall_ms, 0, stamp.peer)
    return WireStamp(stamp.wall_time, stamp.logical + 1, stamp.peer)


def _key(op: CrdtOp) -> tuple[int, str]:
    return (op.slot_id, op.key or "")


class PresenceRooms:
    """Every document's live presence and awareness entries."""

    __slots__ = ("_by_conn", "_floors", "_rooms", "ttl")

    def __init__(self, ttl: float = DEFAULT_TTL) -> None:
        self.ttl = ttl
        self._rooms: dict[str, dict[tuple[int, str], _Live]] = {}
        self._by_conn: dict[ConnId, set[tuple[str, tuple[int, str]]]] = {}
        self._floors: dict[tuple[str, tuple[int, str]], CrdtOp] = {}

    def live(self, stream: str) -> tuple[CrdtOp, ...]:
        room = self._rooms.get(stream, {})
        return tuple(room[k].op for k in sorted(room))

    def __len__(self) -> int:
        return sum(len(room) for room in self._rooms.values())

    def check(self, conn: ConnId, stream: str, ops: Sequence[tuple[int, CrdtOp]]) -> None:
        """Refuse (changing nothing) ops that would break a bound; ``ops`` are ``(index in the
        frame, op)``."""
        room = self._rooms.get(stream, {})
        mine = {k for s, k in self._by_conn.get(conn, set()) if s == stream}
        fresh: set[tuple[int, str]] = set()
        for i, op in ops:
            state = op.state if isinstance(op.state, bytes) else b""
            if len(state) > MAX_VALUE_BYTES:
                raise LimitExceeded(
                    f"a presence or awareness value is {len(state)} bytes, over {MAX_VALUE_BYTES}",
                    path=f"ops[{i}].state",
                )
            key = _key(op)
            if key not in room:
                fresh.add(key)
            mine.add(key)
        if len(mine) > MAX_PER_CONNECTION:
            raise LimitExceeded(
                f"a connection holds at most {MAX_PER_CONNECTION} presence and awareness "
                f"values, not {len(mine)}",
                path="ops",
            )
        if len(room) + len(fresh) > MAX_PER_DOCUMENT:
            raise LimitExceeded(
                f"a document holds at most {MAX_PER_DOCUMENT} presence and awareness values",
                path="ops",
            )

    def put(self, conn: ConnId, stream: str, ops: Iterable[CrdtOp], now: float) -> list[CrdtOp]:
        """Take checked ops; returns those that changed what readers see (to fan out)."""
        room = self._rooms.setdefault(stream, {})
        owned = self._by_conn.setdefault(conn, set())
        changed: list[CrdtOp] = []
        for op in ops:
            key = _key(op)
            held = room.get(key)
            if held is not None and _order(op) <= _order(held.op):
                continue  # an older or repeated value
            floor = self._floors.get((stream, key))
            if floor is not None:
                if _order(op) <= _order(floor):
                    continue  # older than the ending every reader holds: they would drop it
                del self._floors[(stream, key)]
            if op.state == NULL:  # the peer cleared its value
                if held is not None:
                    self._drop(stream, key)
                    changed.append(op)
                continue
            room[key] = _Live(op, conn, now + self.ttl)
            owned.add((stream, key))
            if held is None or held.op.state != op.state:
                changed.append(op)
        if not room:
            del self._rooms[stream]
        return changed

    def put_remote(
        self, node: ConnId, stream: str, ops: Iterable[CrdtOp], now: float
    ) -> list[CrdtOp]:
        """Take another node's values (``node`` < 0 stands for it): only presence and
        awareness entries within the value bound, and no more new entries than the document's
        bound leaves room for (the rest are dropped: they come again with the next heartbeat)."""
        if node >= 0:
            raise ValueError(f"a remote node's connection id is negative, not {node}")
        room = self._rooms.get(stream, {})
        room_left = MAX_PER_DOCUMENT - len(room)
        taken: list[CrdtOp] = []
        for op in ops:
            state = op.state if isinstance(op.state, bytes) else b""
            if not is_ephemeral(op) or len(state) > MAX_VALUE_BYTES:
                continue
            if _key(op) not in room:
                if room_left <= 0:
                    continue
                room_left -= 1
            taken.append(op)
        return self.put(node, stream, taken, now)

    def held(self, stream: str, ops: Iterable[CrdtOp]) -> list[CrdtOp]:
        """Those of ``ops`` that are the live value of their entry (taken, or a repeat)."""
        room = self._rooms.get(stream, {})
        out = []
        for op in ops:
            live = room.get(_key(op))
            if live is not None and live.op == op:
                out.append(op)
        return out

    def local(self, stream: str) -> tuple[CrdtOp, ...]:
        """The live values of ``stream`` set through this node's own connections."""
        room = self._rooms.get(stream, {})
        return tuple(room[k].op for k in sorted(room) if room[k].conn >= 0)

    def forget_remote(self, stream: str) -> None:
        """Drop other nodes' values of ``stream`` (this node stopped following it: none of its
        connections reads it), announcing nothing."""
        for key in [k for k, live in self._rooms.get(stream, {}).items() if live.conn < 0]:
            self._drop(stream, key)

    def close(self, conn: ConnId, wall_ms: int) -> dict[str, list[CrdtOp]]:
        """A connection closed: its presence goes now (its awareness lives out its TTL)."""
        gone: dict[str, list[CrdtOp]] = {}
        for stream, key in sorted(self._by_conn.pop(conn, set())):
            held = self._rooms.get(stream, {}).get(key)
            if held is None or held.conn != conn:
                continue
            layout = layout_of(held.op)
            if layout is not None and layout.kind.tag == PRESENCE:
                gone.setdefault(stream, []).append(self._end(stream, key, wall_ms))
        return gone

    def tick(self, now: float, wall_ms: int) -> dict[str, list[CrdtOp]]:
        """Every value whose TTL is up goes; returns their endings, by document."""
        return {
            stream: [op for op, _ in ends] for stream, ends in self.expire(now, wall_ms).items()
        }

    def expire(self, now: float, wall_ms: int) -> dict[str, list[tuple[CrdtOp, bool]]]:
        """As ``tick``, each ending with whether its value was set through this node (a
        cluster tells other nodes only of those: each node ends a remote value itself)."""
        gone: dict[str, list[tuple[CrdtOp, bool]]] = {}
        for stream, room in list(self._rooms.items()):
            for key in [k for k, live in room.items() if live.expiry <= now]:
                local = room[key].conn >= 0
                gone.setdefault(stream, []).append((self._end(stream, key, wall_ms), local))
        return gone

    def next_expiry(self) -> float | None:
        return min(
            (live.expiry for room in self._rooms.values() for live in room.values()),
            default=None,
        )

    def _end(self, stream: str, key: tuple[int, str], wall_ms: int) -> CrdtOp:
        held = self._rooms[stream][key].op
        self._drop(stream, key)
        ending = CrdtOp(held.slot_id, _stamp_after(held.stamp, wall_ms), NULL, key=held.key)
        self._floors[(stream, key)] = ending
        if len(self._floors) > MAX_FLOORS:
            del self._floors[next(iter(self._floors))]
        return ending

    def _drop(self, stream: str, key: tuple[int, str]) -> None:
        room = self._rooms.get(stream)
        if room is None:
            return
        held = room.pop(key, None)
        if held is not None:
            self._by_conn.get(held.conn, set()).discard((stream, key))
        if not room:
            del self._rooms[stream]


def _order(op: CrdtOp) -> tuple[int, int, int, bytes]:
    state = op.state if isinstance(op.state, bytes) else b""
    return (op.stamp.wall_time, op.stamp.logical, op.stamp.peer, state)
