"""TopGun's event journal (``getEventJournal()``): the map changes this server committed, by
the durable journal's own sequence numbers.

``JOURNAL_READ {fromSequence, limit, mapName?}`` (``readFrom``, ``readMapEvents``) answers the
op records committed at or after ``fromSequence``, read from the journal on a worker thread
(:class:`~octosync.topgun.offload.OffLoop`): at most :data:`MAX_EVENTS` per answer and
:data:`MAX_SCAN` rows looked at, ``hasMore`` set when the journal goes on. Only maps the token
may read are shown; the server's reserved maps never. A ``PUT`` (or an OR add) is ``PUT``, a
remove ``DELETE``; the journal does not say whether a key existed before, so ``UPDATE`` is not
told apart, and ``previousValue`` is absent. ``value`` is the record's value,
``timestamp`` its HLC and ``nodeId`` its writer. ``JOURNAL_SUBSCRIBE {requestId,
fromSequence?, mapName?, types?}`` then sends a ``JOURNAL_EVENT`` per committed change from
there on (:class:`JournalSubscriptions`); ``JOURNAL_UNSUBSCRIBE {subscriptionId}`` ends it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import NIL, WireTimestamp
from octosync.errors import DecodeError, LimitExceeded
from octosync.topgun import durable
from octosync.topgun.offload import OffLoop
from octosync.topgun.replies import disabled, reason
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire.topgun_services import JournalEvent, JournalEventData, JournalSubscribe

MAX_EVENTS = 1000
MAX_SCAN = 10_000
MAX_SUBSCRIPTIONS = 16
TAIL_GAP_MS = 100
"""A subscription reads the journal at most this often (milliseconds)."""


class JournalSource(Protocol):
    """Committed op records from the durable journal (called on a worker thread)."""

    def read(self, start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
        """Up to ``limit`` journal rows from seq ``start``: the op records among them with
        their seqs, and the seq the next read starts from (past every row looked at)."""
        ...

    def latest(self) -> int:
        """The last committed seq."""
        ...


def event(seq: int, rec: OpRecord) -> JournalEventData:
    gone = rec.op in (OpKind.REMOVE, OpKind.OR_REMOVE)
    value = NIL if gone or rec.op is OpKind.INC else msgspec.Raw(rec.value)
    return JournalEventData(
        sequence=str(seq),
        event_type="DELETE" if gone else "PUT",
        map_name=rec.map,
        key=rec.key,
        timestamp=WireTimestamp.of(rec.ts),
        node_id=rec.origin,
        value=value,
    )


def read(
    source: JournalSource,
    start: int,
    limit: int,
    map_name: str | None,
    may_read: Callable[[str], bool],
    types: Collection[str] | None = None,
) -> tuple[list[JournalEventData], bool, int]:
    """Events from seq ``start``: at most ``limit``, reading at most :data:`MAX_SCAN` rows;
    whether the journal holds more after them; and the seq the next read starts from."""
    events: list[JournalEventData] = []
    scanned = 0
    at = start
    while len(events) < limit and scanned < MAX_SCAN:
        rows, after = source.read(at, min(MAX_SCAN - scanned, 1000))
        scanned += max(after - at, 0)
        for seq, rec in rows:
            if (map_name is None or rec.map == map_name) and _shown(rec, may_read):
                e = event(seq, rec)
                if types is None or e.event_type in types:
                    events.append(e)
                    if len(events) == limit:
                        return events, True, seq + 1
        if after == at:  # nothing more committed
            return events, False, at
        at = after
    return events, True, at


def _shown(rec: OpRecord, may_read: Callable[[str], bool]) -> bool:
    return not durable.is_reserved(rec.map) and may_read(rec.map)


def reader(
    source: JournalSource | None,
    conn: int,
    request: rq.JournalRead,
    may_read: Callable[[str], bool],
) -> OffLoop:
    """The off-loop job that answers ``JOURNAL_READ``; raises to refuse it."""
    if source is None:
        raise disabled("the event journal (it needs the server's journal)")
    limit = 100 if request.limit is None else int(request.limit)
    if not 0 < limit <= MAX_EVENTS:
        raise LimitExceeded(f"limit must be 1..{MAX_EVENTS}", path="limit")
    try:
        start = max(1, int(request.from_sequence))
    except ValueError:
        raise DecodeError("fromSequence must be a whole number", path="fromSequence") from None
    rid = request.request_id

    def run() -> list[tg.Message]:
        events, more, _next = read(source, start, limit, request.map_name, may_read)
        return [rq.JournalReadResponse(rid, events, more)]

    def busy() -> list[tg.Message]:
        why = reason(LimitExceeded("the server is busy; read again"))
        return [rq.JournalReadResponse(rid, [], True, why)]

    return OffLoop(conn, run, busy)


@dataclass(slots=True)
class _Sub:
    conn: int
    map_name: str | None
    types: frozenset[str] | None
    may_read: Callable[[str], bool]
    next_seq: int | None
    """Where the next tail reads from; None: from the latest commit on (not known yet)."""
    running: bool = False
    read_at: int = -TAIL_GAP_MS


class JournalSubscriptions:
    """Live ``JOURNAL_SUBSCRIBE``s: each tails the journal from where it stopped, one job at
    a time, after writes (:meth:`tails`, called at each flush, at most every
    :data:`TAIL_GAP_MS`) and at each tick, so a commit reaches its subscribers within a tick;
    ``JOURNAL_EVENT`` per committed change. At most :data:`MAX_SUBSCRIPTIONS` per
    connection."""

    def __init__(self) -> None:
        self._subs: dict[tuple[int, str], _Sub] = {}

    def subscribe(
        self,
        source: JournalSource | None,
        conn: int,
        request: JournalSubscribe,
        may_read: Callable[[str], bool],
    ) -> None:
        if source is None:
            raise disabled("the event journal (it needs the server's journal)")
        mine = sum(1 for c, _ in self._subs if c == conn)
        if (conn, request.request_id) not in self._subs and mine >= MAX_SUBSCRIPTIONS:
            raise LimitExceeded(
                f"at most {MAX_SUBSCRIPTIONS} journal subscriptions per connection",
                path="requestId",
            )
        start = None
        if request.from_sequence is not None:
            try:
                start = max(1, int(request.from_sequence))
            except ValueError:
                raise DecodeError(
                    "fromSequence must be a whole number", path="fromSequence"
                ) from None
        types = None if request.types is None else frozenset(request.types)
        sub = _Sub(conn, request.map_name, types, may_read, start)
        self._subs[(conn, request.request_id)] = sub

    def unsubscribe(self, conn: int, sub_id: str) -> None:
        self._subs.pop((conn, sub_id), None)

    def disconnect(self, conn: int) -> None:
        for key in [k for k in self._subs if k[0] == conn]:
            del self._subs[key]

    def any(self) -> bool:
        return bool(self._subs)

    def placed(self) -> bool:
        """Every subscription knows where in the journal it reads next (a subscription from
        now on learns it from its first read)."""
        return all(sub.next_seq is not None for sub in self._subs.values())

    def tails(self, source: JournalSource | None, now_ms: int) -> list[OffLoop]:
        """A read job for every subscription not reading already and not read in the last
        :data:`TAIL_GAP_MS` (a busy server flushes far more often than that)."""
        if source is None:
            return []
        jobs = []
        for sub in self._subs.values():
            if not sub.running and now_ms - sub.read_at >= TAIL_GAP_MS:
                sub.running = True
                sub.read_at = now_ms
                jobs.append(_tail(source, sub))
        return jobs


def _tail(source: JournalSource, sub: _Sub) -> OffLoop:
    reached: list[int] = []

    def run() -> list[tg.Message]:
        start = source.latest() + 1 if sub.next_seq is None else sub.next_seq
        events, _more, after = read(
            source, start, MAX_EVENTS, sub.map_name, sub.may_read, sub.types
        )
        reached.append(after)
        return [JournalEvent(e) for e in events]

    def after() -> None:  # on the loop
        sub.running = False
        if reached:
            sub.next_seq = reached[0]

    return OffLoop(sub.conn, run, lambda: [], after)
