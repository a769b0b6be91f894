"""TopGun's event journal (``getEventJournal()``): the map changes this server committed, by
the durable journal's own sequence numbers.

``JOURNAL_READ {fromSequence, limit, mapName?}`` (``readFrom``, ``readMapEvents``) answers the
op records committed at or after ``fromSequence``, read from the journal on a worker thread
(:class:`~octosync.topgun.sql.OffLoop`): at most :data:`MAX_EVENTS` per answer and
:data:`MAX_SCAN` rows looked at, ``hasMore`` set when the journal goes on. Only maps the token
may read are shown; the server's reserved maps never. A ``PUT`` (or an OR add) is ``PUT``, a
remove ``DELETE``; the journal does not say whether a key existed before, so ``UPDATE`` is not
told apart, and ``previousValue`` is absent. ``value`` is the record's value,
``timestamp`` its HLC and ``nodeId`` its writer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.sync_messages import NIL, WireTimestamp
from octosync.errors import DecodeError, LimitExceeded
from octosync.topgun import durable
from octosync.topgun.replies import disabled, reason
from octosync.topgun.sql import OffLoop
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire.topgun_services import JournalEventData

MAX_EVENTS = 1000
MAX_SCAN = 10_000


class JournalSource(Protocol):
    """Committed op records from the durable journal (called on a worker thread)."""

    def __call__(self, start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
        """Up to ``limit`` journal rows from seq ``start``: the op records among them with
        their seqs, and the seq the next read starts from (past every row looked at)."""
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
) -> tuple[list[JournalEventData], bool]:
    """Events from seq ``start``: at most ``limit``, reading at most :data:`MAX_SCAN` rows;
    and whether the journal holds more after them."""
    events: list[JournalEventData] = []
    scanned = 0
    at = start
    while len(events) < limit and scanned < MAX_SCAN:
        rows, after = source(at, min(MAX_SCAN - scanned, 1000))
        scanned += max(after - at, 0)
        for seq, rec in rows:
            if (map_name is None or rec.map == map_name) and _shown(rec, may_read):
                events.append(event(seq, rec))
                if len(events) == limit:
                    return events, True
        if after == at:  # nothing more committed
            return events, False
        at = after
    return events, True


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

    def run() -> bytes:
        events, more = read(source, start, limit, request.map_name, may_read)
        return tg.encode(rq.JournalReadResponse(rid, events, more))

    def busy() -> bytes:
        why = reason(LimitExceeded("the server is busy; read again"))
        return tg.encode(rq.JournalReadResponse(rid, [], True, why))

    return OffLoop(conn, run, busy)
