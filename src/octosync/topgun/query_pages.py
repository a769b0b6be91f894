"""What a TopGun query asks beyond a live window: pages, projection, groups (sans-I/O).

- **Pages** (``queryOncePaged``, ``loadMore``): a query with a ``limit`` answers
  ``hasMore`` and, when there is more, ``nextCursor``; a query that brings that ``cursor``
  gets the rows after it in the same order. A cursor is opaque to the client: the sort values
  and key of the last row it saw, and a digest of the query it belongs to, so it resumes
  where that row would be even after writes (no offset to drift) and a cursor given to
  another query is refused (``cursorStatus: "invalid"``). A page after the first is a
  snapshot; the first page is the live query.
- **Projection** (``fields``): only those top-level fields of each value come back, in the
  first answer and in every ``QUERY_UPDATE``; the answer carries ``merkleRootHash`` (a
  digest of the projected result) and a ``QUERY_SYNC_INIT`` after a reconnect gets a fresh
  ``QUERY_RESP`` only when the result changed since.
- **Groups** (``groupBy`` with ``aggregations``): one row per group, keyed by the JSON of
  the group's values, holding those values, ``__count`` and ``__<func>_<field>`` per
  aggregation (sum, min, max, avg over numbers), as TopGun's server names them; a snapshot.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from octosync.errors import DecodeError
from octosync.topgun.queries import (  # the live queries' own order, shared, not copied
    _MISSING,
    Query,
    QuerySpec,
    QueryTable,
    _get,
    _order,
    _sort_keys,
    decode_rows,
)
from octosync.wire import topgun as tg
from octosync.wire.topgun_requests import QuerySyncInitPayload

_DEC = msgspec.msgpack.Decoder()
_ENC = msgspec.msgpack.Encoder()
MAX_GROUP_FIELDS = 8
MAX_AGGREGATIONS = 16
MAX_FIELDS = 256


class Aggregation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    func: Literal["count", "sum", "min", "max", "avg"]
    field: str | None = None


class Extras(msgspec.Struct, frozen=True, rename="camel"):
    """The parts of TopGun's query that ``queries.QuerySpec`` leaves aside."""

    group_by: list[str] | None = None
    aggregations: list[Aggregation] | None = None
    fields: list[str] | None = None
    cursor: str | None = None


def parse_extras(raw: bytes) -> Extras:
    if raw == b"\xc0":
        return Extras()
    try:
        extras = msgspec.msgpack.decode(raw, type=Extras)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc), path="payload.query") from None
    if len(extras.group_by or ()) > MAX_GROUP_FIELDS:
        raise DecodeError(
            f"at most {MAX_GROUP_FIELDS} groupBy fields", path="payload.query.groupBy"
        )
    if len(extras.aggregations or ()) > MAX_AGGREGATIONS:
        raise DecodeError(
            f"at most {MAX_AGGREGATIONS} aggregations", path="payload.query.aggregations"
        )
    for i, agg in enumerate(extras.aggregations or ()):
        if agg.func != "count" and not agg.field:
            raise DecodeError(
                f"{agg.func} needs a field", path=f"payload.query.aggregations[{i}].field"
            )
    return extras


@dataclass(frozen=True, slots=True)
class _Live:
    map_name: str
    spec: QuerySpec
    fields: tuple[str, ...]


class QueryPages:
    """The projections of live queries, and the answers to every ``QUERY_SUB``."""

    def __init__(self) -> None:
        self._live: dict[tuple[int, str], _Live] = {}

    def subscribe(
        self,
        table: QueryTable,
        query: Query,
        raw: bytes,
        payload_fields: list[str] | None,
        items: Callable[[], Mapping[str, bytes]],
    ) -> tg.QueryResp:
        """The ``QUERY_RESP`` for ``query`` over the map's ``items()``; a live query (no
        cursor, no groups) is registered in ``table`` for its updates. A live query past the
        caps is refused before the map is read; the map is decoded once, and a limited
        answer picks its rows by a heap instead of sorting the map."""
        extras = parse_extras(raw)
        fields = tuple(payload_fields or extras.fields or ())
        if len(fields) > MAX_FIELDS:
            raise DecodeError(f"at most {MAX_FIELDS} fields", path="payload.fields")
        qid = query.query_id
        if extras.group_by:
            rows = grouped(query, extras.group_by, extras.aggregations or [], items())
            return _resp(qid, rows, fields)
        limit = query.spec.limit or 0
        if extras.cursor is not None:
            ordered = _unlimited(query).window(decode_rows(items()))
            start = _decode_cursor(extras.cursor, query)
            if start is None:
                payload = tg.QueryRespPayload(qid, [], False, "invalid")
                return tg.QueryResp(payload)
            after = [(k, v) for k, v in ordered.items() if _after(k, v, start, query.spec)]
            return _page(qid, query, after, limit, fields, status="valid")
        table.check_room(query)
        decoded = decode_rows(items())
        peek = _limited(query, limit + 1) if limit else _unlimited(query)
        first = list(peek.window(decoded).items())  # one more than the page: is there more?
        table.subscribe(query, rows=decoded)
        self._live[(query.conn, qid)] = _Live(query.map_name, query.spec, fields)
        return _page(qid, query, first, limit, fields, status="none")

    def project(self, conn: int, query_id: str, value: bytes) -> bytes:
        """A ``QUERY_UPDATE`` value as the query asked for it."""
        live = self._live.get((conn, query_id))
        if live is None or not live.fields:
            return value
        return project(value, live.fields)

    def live_map(self, conn: int, query_id: str) -> str:
        """The map of a live query of ``conn`` (``QUERY_SYNC_INIT`` names only the query)."""
        live = self._live.get((conn, query_id))
        if live is None:
            raise DecodeError(
                f"no live query {query_id!r} on this connection", path="payload.queryId"
            )
        return live.map_name

    def resume(
        self, conn: int, p: QuerySyncInitPayload, items: Mapping[str, bytes]
    ) -> tg.QueryResp | None:
        """``QUERY_SYNC_INIT``: a fresh answer when the result changed since the client's
        ``rootHash``; None when it did not."""
        live = self._live[(conn, p.query_id)]
        window = Query(conn, p.query_id, live.map_name, live.spec).window(decode_rows(items))
        rows = [(k, project(v, live.fields)) for k, v in window.items()]
        if root_hash(rows) == p.root_hash:
            return None
        return _resp(p.query_id, rows, ())

    def forget(self, conn: int, query_id: str) -> None:
        self._live.pop((conn, query_id), None)

    def disconnect(self, conn: int) -> None:
        for key in [k for k in self._live if k[0] == conn]:
            del self._live[key]


def _unlimited(query: Query) -> Query:
    return _limited(query, None)


def _limited(query: Query, limit: int | None) -> Query:
    spec = msgspec.structs.replace(query.spec, limit=limit)
    return Query(query.conn, query.query_id, query.map_name, spec)


def _page(
    qid: str,
    query: Query,
    rows: list[tuple[str, bytes]],
    limit: int,
    fields: tuple[str, ...],
    *,
    status: str,
) -> tg.QueryResp:
    more = bool(limit) and len(rows) > limit
    shown = rows[:limit] if limit else rows
    cursor = None
    if more:
        last_key, last_value = shown[-1]
        cursor = _encode_cursor(query, last_key, last_value)
    projected = [(k, project(v, fields)) for k, v in shown]
    results = [tg.QueryResult(k, msgspec.Raw(v)) for k, v in projected]
    payload = tg.QueryRespPayload(
        qid,
        results,
        has_more=more,
        cursor_status=status,
        next_cursor=cursor,
        merkle_root_hash=root_hash(projected) if fields else None,
    )
    return tg.QueryResp(payload)


def _resp(qid: str, rows: list[tuple[str, bytes]], fields: tuple[str, ...]) -> tg.QueryResp:
    projected = [(k, project(v, fields)) for k, v in rows]
    results = [tg.QueryResult(k, msgspec.Raw(v)) for k, v in projected]
    digest = root_hash(projected) if fields else None
    return tg.QueryResp(tg.QueryRespPayload(qid, results, merkle_root_hash=digest))


def project(value: bytes, fields: tuple[str, ...]) -> bytes:
    if not fields:
        return value
    data = _DEC.decode(value)
    if not isinstance(data, dict):
        return value
    return _ENC.encode({f: data[f] for f in fields if f in data})


def root_hash(rows: list[tuple[str, bytes]]) -> int:
    """A 32-bit digest of a result (keys and value bytes, in key order)."""
    digest = 0
    for key, value in sorted(rows):
        digest = zlib.crc32(value, zlib.crc32(key.encode() + b"\0", digest))
    return digest


# -- cursors ----------------------------------------------------------------------------------


def _query_digest(query: Query) -> bytes:
    spec = query.spec
    shape = _ENC.encode([query.map_name, spec.where, spec.predicate, spec.sort])
    return hashlib.blake2s(shape, digest_size=8).digest()


def _sort_values(spec: QuerySpec, value: bytes) -> list[Any]:
    data = _DEC.decode(value)
    out = []
    for name, _desc in _sort_keys(spec):
        got = _get(data, name)
        out.append(None if got is _MISSING else got)
    return out


def _encode_cursor(query: Query, key: str, value: bytes) -> str:
    body = _ENC.encode([_query_digest(query), _sort_values(query.spec, value), key])
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


def _decode_cursor(cursor: str, query: Query) -> tuple[list[Any], str] | None:
    """The (sort values, key) a cursor resumes after; None when it is not this query's."""
    try:
        body = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        digest, values, key = msgspec.msgpack.decode(body, type=tuple[bytes, list[Any], str])
    except (ValueError, msgspec.DecodeError):
        return None
    if digest != _query_digest(query) or len(values) != len(_sort_keys(query.spec)):
        return None
    return values, key


def _after(key: str, value: bytes, start: tuple[list[Any], str], spec: QuerySpec) -> bool:
    """Whether a row comes after the cursor's row in the query's order (sort fields, then
    key ascending, as ``Query.window`` orders)."""
    values = _sort_values(spec, value)
    for (_name, desc), mine, theirs in zip(_sort_keys(spec), values, start[0], strict=True):
        c = _order(mine, theirs)
        if c:
            return (-c if desc else c) > 0
    return key > start[1]


# -- groups -----------------------------------------------------------------------------------


def grouped(
    query: Query, group_by: list[str], aggregations: list[Aggregation], items: Mapping[str, bytes]
) -> list[tuple[str, bytes]]:
    """One row per group of the query's matching rows: (group key, MsgPack value)."""
    groups: dict[str, tuple[list[Any], list[Any]]] = {}
    for value in _unlimited(query).window(decode_rows(items)).values():
        data = _DEC.decode(value)
        keys = [_plain(_get(data, f)) for f in group_by]
        gkey = msgspec.json.encode(keys).decode()
        groups.setdefault(gkey, (keys, []))[1].append(data)
    rows: list[tuple[str, bytes]] = []
    for gkey, (keys, members) in groups.items():
        row: dict[str, Any] = dict(zip(group_by, keys, strict=True))
        row["__count"] = len(members)
        for agg in aggregations:
            if agg.func == "count" or agg.field is None:
                continue
            numbers = [
                n
                for m in members
                if isinstance(n := _get(m, agg.field), int | float) and not isinstance(n, bool)
            ]
            row[f"__{agg.func}_{agg.field}"] = _aggregate(agg.func, numbers)
        rows.append((gkey, _ENC.encode(row)))
    rows.sort()  # by group key, then stable sorts by the query's fields, last field first
    for name, desc in reversed(_sort_keys(query.spec)):

        def by(row: tuple[str, bytes], field: str = name) -> _SortKey:
            return _SortKey(_get(_DEC.decode(row[1]), field))

        rows.sort(key=by, reverse=desc)
    if query.spec.limit:
        rows = rows[: query.spec.limit]
    return rows


def _plain(value: Any) -> Any:
    return None if value is _MISSING else value


def _aggregate(func: str, numbers: list[float]) -> float | None:
    if func == "sum":
        return sum(numbers)
    if not numbers:
        return None
    if func == "min":
        return min(numbers)
    if func == "max":
        return max(numbers)
    return sum(numbers) / len(numbers)


class _SortKey:
    """Orders values as ``queries`` does (missing and null first, mixed types by name)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _SortKey) -> bool:
        return _order(self.value, other.value) < 0
