"""TopGun's event journal without sockets: what a read shows, by grant and map, bounded."""

from __future__ import annotations

from typing import Any

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.server.auth import ClaimGrants
from octosync.server.topgun_wire import encode
from octosync.topgun import TopGunCore, durable, event_journal
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv
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


class Rows:
    """A journal as a list of rows (``None``: a row of another kind)."""

    def __init__(self, rows: list[tuple[int, OpRecord | None]]) -> None:
        self.rows = list(rows)

    def read(self, start: int, limit: int) -> tuple[list[tuple[int, OpRecord]], int]:
        rows = [(s, r) for s, r in self.rows if s >= start][:limit]
        ops = [(s, r) for s, r in rows if r is not None]
        return ops, (rows[-1][0] + 1 if rows else start)

    def latest(self) -> int:
        return self.rows[-1][0] if self.rows else 0


source = Rows(ROWS)


def test_a_read_shows_what_the_token_may_read_by_journal_sequence() -> None:
    may = ClaimGrants.of("r", maps={"users": frozenset({"read"}), "notes": frozenset({"read"})})
    events, more, _ = event_journal.read(source, 1, 10, None, lambda m: may.may_map(m, "read"))
    assert [(e.sequence, e.map_name, e.key, e.event_type) for e in events] == [
        ("1", "users", "a", "PUT"),
        ("5", "users", "a", "DELETE"),
        ("6", "notes", "n", "PUT"),
    ]
    assert more is False
    assert msgspec.msgpack.decode(bytes(events[2].value)) == {"t": "x"}
    assert events[0].node_id == "w"


def test_limit_map_and_start() -> None:
    events, more, _ = event_journal.read(source, 1, 1, None, lambda _m: True)
    assert [e.sequence for e in events] == ["1"]
    assert more is True
    events, _, _ = event_journal.read(source, 2, 10, "users", lambda _m: True)
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
    (reply,) = [tg.decode(encode(m)) for m in job.run()]
    assert isinstance(reply, rq.JournalReadResponse)
    assert [e.sequence for e in reply.events] == ["1", "3", "5", "6"]
    (too_many,) = sent(c.handle(1, rq.JournalRead("j2", "0", 5000)), 1)
    assert isinstance(too_many, rq.JournalReadResponse)
    assert too_many.error is not None
    assert "limit" in too_many.error


def tail(c: TopGunCore) -> list[tuple[str, str, str]]:
    """A second later, run every tail job as the server would (the worker, then ``after``
    on the loop)."""
    assert isinstance(c.clock, Clock)
    c.clock.now += 1000
    got = []
    for job in c.tick().offload:
        for data in job.run():
            m = tg.decode(encode(data))
            assert isinstance(m, sv.JournalEvent)
            got.append((m.event.sequence, m.event.key, m.event.event_type))
        assert job.after is not None
        job.after()
    return got


def test_a_subscription_tails_the_journal_from_where_it_stopped() -> None:
    journal = Rows(ROWS[:2])
    c = TopGunCore(Clock(), persistent=True)
    c.journal = journal
    c.connect(1, ClaimGrants.of("r", maps={"users": frozenset({"read"})}))
    fx = c.handle(1, sv.JournalSubscribe("s1"))  # from now on: rows 1-2 are history
    for job in fx.offload:
        job.run()
        assert job.after is not None
        job.after()
    journal.rows += ROWS[2:]
    assert tail(c) == [("5", "a", "DELETE")]  # the secret and reserved maps stay hidden
    assert tail(c) == []
    journal.rows.append((7, op("users", "b")))
    assert tail(c) == [("7", "b", "PUT")]
    c.handle(1, rq.JournalUnsubscribe("s1"))
    journal.rows.append((8, op("users", "c")))
    assert tail(c) == []


def test_a_subscription_from_a_sequence_with_types() -> None:
    c = TopGunCore(Clock(), persistent=True)
    c.journal = Rows(ROWS)
    c.connect(1, ALL)
    c.handle(1, sv.JournalSubscribe("s1", from_sequence="1", types=["DELETE"]))
    assert tail(c) == []  # the subscribe's own job is still "running" until its after()
    c.disconnect(1)
    c.connect(2, ALL)
    fx = c.handle(2, sv.JournalSubscribe("s2", from_sequence="1", types=["DELETE"]))
    (job,) = fx.offload
    assert [tg.decode(encode(m)).event.key for m in job.run()] == ["a"]  # type: ignore[union-attr]
