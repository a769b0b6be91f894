"""TopGun's event journal without sockets: what a read shows, by grant and map, bounded."""

from __future__ import annotations

from typing import Any

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.server.auth import ClaimGrants
from octosync.topgun import TopGunCore, durable, event_journal
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from tests.topgun.helpers import ALL, Clock, sent


def op(map_name: str, key: str, kind: OpKind = OpKind.PUT, value: Any = 1) -> OpRecord:
    body = msgspec.msgpack.encode(value) if kind is OpKind.PUT else b"\xc0"
    return OpRecord(map_name, key, kind, body, Timestamp(10, 0, "w"), "w", f"{map_name}:{key}")


ROWS: list[tuple[int, OpRecord | None]] = [
    (1, op("users", "a")),
    (2, None),  # a row of another kind (a stream frame)
    (3, op("secret", "s")),
    (4, op(durable.LOCKS_MAP, "fencing-token")),
    (5, op("users", "a", OpKind.REMOVE)),
    (6, op("notes", "n", value={"t": "x"})),
]


def source(start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
    rows = [(s, r) for s, r in ROWS if s >= start][:limit]
    ops = [(s, r) for s, r in rows if r is not None]
    return ops, (rows[-1][0] + 1 if rows else start)


def test_a_read_shows_what_the_token_may_read_by_journal_sequence() -> None:
    may = ClaimGrants.of("r", maps={"users": frozenset({"read"}), "notes": frozenset({"read"})})
    events, more = event_journal.read(source, 1, 10, None, lambda m: may.may_map(m, "read"))
    assert [(e.sequence, e.map_name, e.key, e.event_type) for e in events] == [
        ("1", "users", "a", "PUT"),
        ("5", "users", "a", "DELETE"),
        ("6", "notes", "n", "PUT"),
    ]
    assert more is False
    assert msgspec.msgpack.decode(bytes(events[2].value)) == {"t": "x"}
    assert events[0].node_id == "w"


def test_limit_map_and_start() -> None:
    events, more = event_journal.read(source, 1, 1, None, lambda _m: True)
    assert [e.sequence for e in events] == ["1"]
    assert more is True
    events, _ = event_journal.read(source, 2, 10, "users", lambda _m: True)
    assert [e.sequence for e in events] == ["5"]


def test_the_core_answers_off_the_loop_or_says_it_has_no_journal() -> None:
    c = TopGunCore(Clock(), persistent=True)
    c.connect(1, ALL)
    ask = rq.JournalRead("j1", "0", 10)
    (refused,) = sent(c.handle(1, ask), 1)  # no journal here
    assert isinstance(refused, rq.JournalReadResponse)
    assert refused.error is not None
    c.journal = source
    (job,) = c.handle(1, ask).offload
    reply = tg.decode(job.run())
    assert isinstance(reply, rq.JournalReadResponse)
    assert [e.sequence for e in reply.events] == ["1", "3", "5", "6"]
    (too_many,) = sent(c.handle(1, rq.JournalRead("j2", "0", 5000)), 1)
    assert isinstance(too_many, rq.JournalReadResponse)
    assert too_many.error is not None
    assert "limit" in too_many.error
