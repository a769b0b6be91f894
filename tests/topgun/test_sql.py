"""SQL over TopGun maps without sockets: the answer, read-only, grants, and every bound."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from octosync.server.auth import ClaimGrants
from octosync.server.topgun_wire import encode
from octosync.topgun import TopGunCore
from octosync.topgun.sql import MAX_RESULT_ROWS, MAX_SECONDS
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from tests.conftest import require_module
from tests.topgun.helpers import ALL, Clock, batch, put, sent

require_module("duckdb", "the sql extra")

PEOPLE = {
    "u1": {"name": "Ann", "age": 31, "tags": ["a"]},
    "u2": {"name": "Bo", "age": 22.5, "tags": "b"},
    "u3": {"name": "Cy", "age": 45},
}


def core(grants: ClaimGrants = ALL, *, enabled: bool = True) -> TopGunCore:
    c = TopGunCore(Clock(), persistent=False, sql=enabled)
    c.connect(1, ALL)
    ops = [put(str(i), k, v, 100 + i) for i, (k, v) in enumerate(PEOPLE.items(), 1)]
    c.handle(1, batch(*ops))
    c.connect(2, grants)
    return c


def ask(
    c: TopGunCore, text: str, conn: int = 2, *, overdue: bool = False
) -> rq.SqlQueryRespPayload:
    """The answer to ``text``; ``overdue``: the job runs on a thread of its own and is
    interrupted as the server does once its time is up (again and again, until it returns)."""
    fx = c.handle(conn, rq.SqlQuery(rq.SqlQueryPayload(text, "q1")))
    if fx.offload:
        (job,) = fx.offload
        assert job.conn == conn
        assert job.seconds == MAX_SECONDS
        if overdue:
            assert job.interrupt is not None
            got: list[tg.Message] = []
            worker = threading.Thread(target=lambda: got.extend(job.run()))
            worker.start()
            for _ in range(10_000):  # bounded: the query ends at the first interrupt it sees
                job.interrupt()
                worker.join(0.01)
                if not worker.is_alive():
                    break
            assert not worker.is_alive()
            (reply,) = [tg.decode(encode(m)) for m in got]
        else:
            (reply,) = [tg.decode(encode(m)) for m in job.run()]  # what the worker answers
    else:
        (reply,) = sent(fx, conn)
    assert isinstance(reply, rq.SqlQueryResp)
    assert reply.payload.query_id == "q1"
    return reply.payload


def rows(payload: rq.SqlQueryRespPayload) -> list[list[Any]]:
    return [[msgspec.msgpack.decode(bytes(cell)) for cell in row] for row in payload.rows]


def test_a_select_over_a_map_as_a_table() -> None:
    got = ask(core(), "SELECT _key, name, age FROM users WHERE age > 25 ORDER BY age DESC")
    assert got.error is None
    assert got.columns == ["_key", "name", "age"]
    assert rows(got) == [["u3", "Cy", 45.0], ["u1", "Ann", 31.0]]  # ints and floats: DOUBLE
    mixed = ask(core(), "SELECT tags FROM users ORDER BY _key")
    assert rows(mixed) == [['["a"]'], ['"b"'], [None]]  # mixed types: JSON text


@pytest.mark.parametrize(
    "text",
    [
        "DELETE FROM users",
        "CREATE TABLE t AS SELECT 1",
        "ATTACH 'x.db'",
        "SELECT 1; SELECT 2",
        "COPY users TO 'out.csv'",
    ],
)
def test_only_one_select_is_run(text: str) -> None:
    got = ask(core(), text)
    assert got.error is not None
    assert got.rows == []


def test_no_file_or_network_access_from_sql() -> None:
    got = ask(core(), "SELECT * FROM read_csv('/etc/passwd')")
    assert got.error is not None
    assert "passwd" not in "".join(str(r) for r in got.rows)


def test_a_map_the_token_may_not_read_is_refused() -> None:
    reader = ClaimGrants.of("r", maps={"other": frozenset({"read"})})
    got = ask(core(reader), "SELECT * FROM users")
    assert got.code == "FORBIDDEN"


def test_bounds_time_and_rows() -> None:
    slow = ask(core(), "SELECT count(*) FROM range(100000000000) a", overdue=True)
    assert slow.code == "LIMIT_EXCEEDED"
    many = ask(core(), f"SELECT * FROM range({MAX_RESULT_ROWS + 1})")
    assert many.code == "LIMIT_EXCEEDED"
    assert many.rows == []


def test_sql_switched_off_says_feature_disabled() -> None:
    got = ask(core(enabled=False), "SELECT 1")
    assert got.code == "FEATURE_DISABLED"
