"""Pages, projection, groups and resume of TopGun queries, without sockets."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.wire import topgun as tg
from octosync.wire.topgun_requests import QuerySyncInit, QuerySyncInitPayload
from tests.topgun.helpers import ALL, batch, core, put, sent


def sub(query_id: str, query: dict[str, Any], fields: list[str] | None = None) -> tg.QuerySub:
    raw = msgspec.Raw(msgspec.msgpack.encode(query))
    return tg.QuerySub(tg.QuerySubPayload(query_id, "users", raw, fields))


def ask(c: Any, message: tg.Message, conn: int = 1) -> tg.QueryRespPayload:
    (resp,) = [m for m in sent(c.handle(conn, message), conn) if isinstance(m, tg.QueryResp)]
    assert isinstance(resp, tg.QueryResp)
    return resp.payload


def values(payload: tg.QueryRespPayload) -> list[tuple[str, Any]]:
    return [(r.key, msgspec.msgpack.decode(bytes(r.value))) for r in payload.results]


def loaded(ages: dict[str, int | None]) -> Any:
    c = core()
    c.connect(1, ALL)
    ops = [
        put(str(i), key, {"age": age, "name": key.upper()}, 10 + i)
        for i, (key, age) in enumerate(sorted(ages.items()), start=1)
    ]
    if ops:
        c.handle(1, batch(*ops))
    return c


def walk(c: Any, query: dict[str, Any]) -> list[str]:
    """Every key, page by page, following nextCursor as loadMore does."""
    seen: list[str] = []
    page = ask(c, sub("q0", query))
    for n in range(1, 200):
        seen += [r.key for r in page.results]
        if not page.has_more:
            assert page.next_cursor is None
            return seen
        assert page.next_cursor is not None
        page = ask(c, sub(f"q{n}", {**query, "cursor": page.next_cursor}))
        assert page.cursor_status == "valid"
    raise AssertionError("pages never ended")


AGES = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 9)),
    max_size=25,
)


@given(AGES, st.integers(1, 6), st.sampled_from(["asc", "desc"]))
@settings(max_examples=80, deadline=None)
def test_pages_cover_the_ordered_result_exactly_once(
    ages: dict[str, int | None], limit: int, direction: str
) -> None:
    c = loaded(ages)
    query = {"sort": [{"field": "age", "direction": direction}], "limit": limit}
    keys = walk(c, query)
    present = [k for k, a in ages.items() if a is not None]
    absent = [k for k, a in ages.items() if a is None]
    by_age = sorted(present, key=lambda k: (ages[k], k))
    if direction == "desc":  # null sorts first ascending, so last descending
        by_age = sorted(present, key=lambda k: (-(ages[k] or 0), k))
        expected = by_age + sorted(absent)
    else:
        expected = sorted(absent) + by_age
    assert keys == expected


def test_a_page_after_a_write_resumes_where_its_last_row_would_be() -> None:
    c = loaded({"a": 1, "b": 2, "c": 3, "d": 4})
    first = ask(c, sub("q", {"sort": [{"field": "age", "direction": "asc"}], "limit": 2}))
    assert [r.key for r in first.results] == ["a", "b"]
    c.handle(1, batch(put("9", "a0", {"age": 0}, 99), put("10", "b", {"age": 9}, 100)))
    query = {
        "sort": [{"field": "age", "direction": "asc"}],
        "limit": 2,
        "cursor": first.next_cursor,
    }
    nxt = ask(c, sub("q2", query))
    assert [r.key for r in nxt.results] == ["c", "d"]  # a0 sorts before the cursor; b moved
    assert nxt.has_more is True


def test_a_cursor_of_another_query_or_garbage_is_invalid() -> None:
    c = loaded({"a": 1, "b": 2, "c": 3})
    first = ask(c, sub("q", {"sort": [{"field": "age", "direction": "asc"}], "limit": 1}))
    other = {"sort": [{"field": "name", "direction": "asc"}], "limit": 1}
    for cursor in (first.next_cursor, "not-a-cursor", ""):
        page = ask(c, sub("x", {**other, "cursor": cursor}))
        assert page.cursor_status == "invalid"
        assert page.results == []


def test_fields_project_the_answer_and_every_update() -> None:
    c = loaded({"a": 30})
    c.connect(2, ALL)
    first = ask(c, sub("q", {}, fields=["name"]), conn=2)
    assert values(first) == [("a", {"name": "A"})]
    assert first.merkle_root_hash is not None
    fx = c.handle(1, batch(put("5", "b", {"age": 5, "name": "B", "secret": 1}, 50)))
    (update,) = [m for m in sent(fx, 2) if isinstance(m, tg.QueryUpdate)]
    assert msgspec.msgpack.decode(bytes(update.payload.value)) == {"name": "B"}


def test_fields_inside_the_query_also_project() -> None:
    c = loaded({"a": 30})
    assert values(ask(c, sub("q", {"fields": ["age"]}))) == [("a", {"age": 30})]


def test_query_sync_init_answers_only_when_the_result_changed() -> None:
    c = loaded({"a": 30})
    first = ask(c, sub("q", {}, fields=["name"]))
    assert first.merkle_root_hash is not None
    same = QuerySyncInit(QuerySyncInitPayload("q", first.merkle_root_hash))
    assert sent(c.handle(1, same), 1) == []
    c.handle(1, batch(put("7", "b", {"age": 1, "name": "B"}, 70)))
    again = ask(c, same)
    assert values(again) == [("a", {"name": "A"}), ("b", {"name": "B"})]
    unknown = ask(c, QuerySyncInit(QuerySyncInitPayload("nope", 1)))
    assert unknown.error is not None


def test_group_by_with_aggregations() -> None:
    c = core()
    c.connect(1, ALL)
    rows = [("p1", "books", 10), ("p2", "books", 30), ("p3", "games", 5), ("p4", "games", "x")]
    c.handle(
        1,
        batch(
            *(
                put(str(i), k, {"cat": cat, "price": price}, 10 + i)
                for i, (k, cat, price) in enumerate(rows, start=1)
            )
        ),
    )
    aggs = [{"func": f, "field": "price"} for f in ("sum", "avg", "min", "max")]
    aggs.append({"func": "count"})
    got = dict(values(ask(c, sub("g", {"groupBy": ["cat"], "aggregations": aggs}))))
    assert got['["books"]'] == {
        "cat": "books",
        "__count": 2,
        "__sum_price": 40,
        "__avg_price": 20.0,
        "__min_price": 10,
        "__max_price": 30,
    }
    assert got['["games"]']["__count"] == 2  # the row whose price is not a number counts
    assert got['["games"]']["__sum_price"] == 5
    limited = ask(c, sub("g2", {"groupBy": ["cat"], "sort": {"__count": "desc"}, "limit": 1}))
    assert len(limited.results) == 1
