"""Live queries: a predicate, sort and limit over one map, kept up to date as writes arrive.

``where`` is an equality AND; ``predicate`` is TopGun's tree ``{op, attribute?, value?,
children?}`` with eq, neq, gt, gte, lt, lte, like (SQL ``%``/``_``, case-insensitive), regex,
in, between, isNull, isNotNull, contains, and, or, not. Attributes may be dotted paths; a
missing or null attribute fails every comparison. ``sort`` is ``[{field, direction}]`` (or
``{field: direction}``), ``limit`` caps the result.

Incremental: queries are indexed by map, and a written key is only looked at by its map's
queries; a query without a limit decides ENTER / UPDATE / LEAVE from that key alone. With a
limit, a write that neither matched before nor matches now changes nothing; otherwise the
query's window is recomputed and diffed.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key, lru_cache
from typing import Any

import msgspec
import re2

from octosync.errors import DecodeError, LimitExceeded

_DEC = msgspec.msgpack.Decoder()
_ENC = msgspec.msgpack.Encoder()
_MISSING = object()
COMPARISONS = ("eq", "neq", "gt", "gte", "lt", "lte")
OPERATORS = (
    *COMPARISONS,
    "like",
    "regex",
    "in",
    "between",
    "isNull",
    "isNotNull",
    "contains",
    "and",
    "or",
    "not",
)


MAX_PATTERN = 1024
"""Characters in a ``like`` or ``regex`` pattern at most."""
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 8 << 20
_RE2_OPTIONS.log_errors = False
"""A compiled pattern's memory is bounded too (RE2 refuses a pattern that needs more)."""


class QuerySpec(msgspec.Struct, frozen=True, rename="camel"):
    where: dict[str, Any] | None = None
    predicate: dict[str, Any] | None = None
    sort: list[dict[str, Any]] | dict[str, str] | None = None
    limit: int | None = None
    cursor: Any = None


def parse_spec(raw: bytes) -> QuerySpec:
    if raw == b"\xc0":
        return QuerySpec()
    try:
        spec = msgspec.msgpack.decode(raw, type=QuerySpec)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc), path="payload.query") from None
    if spec.predicate is not None:
        _check(spec.predicate, "payload.query.predicate")
    if spec.limit is not None and spec.limit < 0:
        raise DecodeError("limit must be >= 0", path="payload.query.limit")
    return spec


def _check(node: Any, path: str) -> None:
    if not isinstance(node, dict) or node.get("op") not in OPERATORS:
        raise DecodeError(f"a predicate needs an op among {OPERATORS}", path=f"{path}.op")
    op, target = node.get("op"), node.get("value")
    if op in ("like", "regex") and isinstance(target, str):
        if len(target) > MAX_PATTERN:
            raise DecodeError(
                f"a {op} pattern has at most {MAX_PATTERN} characters, not {len(target)}",
                path=f"{path}.value",
            )
        try:
            _like(target) if op == "like" else _regex(target)
        except re2.error as exc:
            raise DecodeError(
                f"not a pattern the linear-time engine (RE2) takes: {exc}", path=f"{path}.value"
            ) from None
    for i, child in enumerate(node.get("children") or []):
        _check(child, f"{path}.children[{i}]")


def _get(data: Any, attribute: str) -> Any:
    if isinstance(data, dict) and attribute in data:
        return data[attribute]
    cur = data
    for part in attribute.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _compare(op: str, value: Any, target: Any) -> bool:
    if value is _MISSING or value is None:
        return False
    try:
        if op == "eq":
            return bool(value == target)
        if op == "neq":
            return bool(value != target)
        if op == "gt":
            return bool(value > target)
        if op == "gte":
            return bool(value >= target)
        if op == "lt":
            return bool(value < target)
        return bool(value <= target)
    except TypeError:
        return False


@lru_cache(maxsize=1024)
def _like(pattern: str) -> Any:
    """SQL ``like`` as an RE2 program: matching takes time linear in the value, whatever
    the pattern (a backtracking engine takes exponential time on ``%a%a%a%b``)."""
    body = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re2.compile(f"(?is)^{body}$", _RE2_OPTIONS)


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """A client's regex, run by RE2 (no backreferences or lookaround: linear time)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def matches(predicate: Mapping[str, Any], data: Any) -> bool:
    op = predicate.get("op")
    children = predicate.get("children") or []
    if op == "and":
        return all(matches(c, data) for c in children)
    if op == "or":
        return any(matches(c, data) for c in children)
    if op == "not":
        return not matches(children[0], data) if children else True
    attribute = predicate.get("attribute")
    if not isinstance(attribute, str) or data is None:
        return False
    value = _get(data, attribute)
    target = predicate.get("value")
    if op in COMPARISONS:
        return _compare(str(op), value, target)
    if op == "isNull":
        return value is _MISSING or value is None
    if op == "isNotNull":
        return value is not _MISSING and value is not None
    if op == "in":
        return isinstance(target, list) and value is not _MISSING and value in target
    if op == "between":
        return (
            isinstance(target, list)
            and len(target) == 2
            and _compare("gte", value, target[0])
            and _compare("lte", value, target[1])
        )
    if not isinstance(value, str) or not isinstance(target, str):
        return False
    try:
        if op == "like":
            return _like(target).search(value) is not None
        if op == "regex":
            return _regex(target).search(value) is not None
    except re2.error:
        return False
    return target.lower() in value.lower()  # contains


def _sort_keys(spec: QuerySpec) -> list[tuple[str, bool]]:
    if spec.sort is None:
        return []
    if isinstance(spec.sort, dict):
        return [(f, str(d).lower() == "desc") for f, d in spec.sort.items()]
    return [
        (str(s.get("field")), str(s.get("direction", "asc")).lower() == "desc") for s in spec.sort
    ]


Row = tuple[str, bytes, Any]
"""``(key, value bytes, decoded value)``: a map's rows are decoded once per write, for every
query that needs them."""


@dataclass(slots=True)
class Query:
    conn: int
    query_id: str
    map_name: str
    spec: QuerySpec
    keys: dict[str, bytes] = field(default_factory=dict)
    """Current result: key -> value bytes, in result order."""
    decoded: dict[str, Any] = field(default_factory=dict)
    """The decoded values of ``keys`` (a limited query's window), for incremental updates."""
    _rank: Callable[[Row], Any] | None = None

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, dict):
            return self.spec.where is None and self.spec.predicate is None
        if self.spec.where and any(
            _get(value, k) is _MISSING or _get(value, k) != v for k, v in self.spec.where.items()
        ):
            return False
        return self.spec.predicate is None or matches(self.spec.predicate, value)

    def rank(self, row: Row) -> Any:
        """The sort key of a row: the query's sort fields, then the map key."""
        if self._rank is None:
            order = _sort_keys(self.spec)

            def cmp(a: Row, b: Row) -> int:
                for name, desc in order:
                    c = _order(_get(a[2], name), _get(b[2], name))
                    if c:
                        return -c if desc else c
                return (a[0] > b[0]) - (a[0] < b[0])

            self._rank = cmp_to_key(cmp)
        return self._rank(row)

    def window(self, rows: list[Row]) -> dict[str, bytes]:
        """The result over a map's decoded ``rows``: filtered, sorted, limited (the ``limit``
        smallest are picked, not the whole map sorted)."""
        kept = [r for r in rows if self.accepts(r[2])]
        if self.spec.limit:
            kept = heapq.nsmallest(self.spec.limit, kept, key=self.rank)
        else:
            kept.sort(key=self.rank)
        if self.spec.limit:
            self.decoded = {k: d for k, _, d in kept}
        return {k: v for k, v, _ in kept}


def decode_rows(items: Mapping[str, bytes]) -> list[Row]:
    return [(k, v, _DEC.decode(v)) for k, v in items.items()]


def _order(x: Any, y: Any) -> int:
    """Missing and null sort first; values of different types by type name."""
    xm, ym = x is _MISSING or x is None, y is _MISSING or y is None
    if xm or ym:
        return (not xm) - (not ym)
    try:
        return int((x > y) - (x < y))
    except TypeError:
        return (type(x).__name__ > type(y).__name__) - (type(x).__name__ < type(y).__name__)


Change = tuple[int, str, str, bytes | None, str]
"""``(conn, query id, key, value bytes or None, ENTER | UPDATE | LEAVE)``."""


class QueryTable:
    """Every live query, by map and by connection. A map name is kept only while a query is on
    it, and a connection may hold ``per_connection`` queries, a map ``per_map``: the work one
    write causes is bounded by what the server allows, not by what clients ask for."""

    def __init__(self, *, per_connection: int = 64, per_map: int = 1024) -> None:
        self.per_connection = per_connection
        self.per_map = per_map
        self._by_map: dict[str, dict[tuple[int, str], Query]] = {}
        self._by_conn: dict[int, dict[str, str]] = {}
        """conn -> query id -> map name."""
        self._dirty: dict[str, set[str]] = {}
        """map -> keys written that some of its queries have not looked at yet."""
        self._todo: dict[str, dict[tuple[int, str], None]] = {}
        """map -> its queries that owe a look at the dirty keys, in order (an ordered set)."""

    def watched(self) -> set[str]:
        """The maps some live query is on."""
        return set(self._by_map)

    def subscribe(
        self,
        query: Query,
        items: Mapping[str, bytes] | None = None,
        *,
        rows: list[Row] | None = None,
    ) -> dict[str, bytes]:
        """Start ``query`` (replacing one of the same id) over the map's ``items`` (or its
        rows decoded already), or raise ``LimitExceeded`` and keep nothing."""
        self.check_room(query)
        if rows is None:
            rows = decode_rows(items or {})
        query.keys = query.window(rows)
        self._by_map.setdefault(query.map_name, {})[(query.conn, query.query_id)] = query
        self._by_conn.setdefault(query.conn, {})[query.query_id] = query.map_name
        return query.keys

    def check_room(self, query: Query) -> None:
        """``LimitExceeded`` unless ``query`` may start (one of the same id is let go first):
        asked before any work is done for it."""
        mine = self._by_conn.get(query.conn, {})
        if query.query_id in mine:
            self.unsubscribe(query.conn, query.query_id)
            mine = self._by_conn.get(query.conn, {})
        if len(mine) >= self.per_connection:
            raise LimitExceeded(
                f"a connection may hold {self.per_connection} live queries", path="payload.queryId"
            )
        if len(self._by_map.get(query.map_name, ())) >= self.per_map:
            raise LimitExceeded(
                f"map {query.map_name!r} already has {self.per_map} live queries",
                path="payload.mapName",
            )

    def unsubscribe(self, conn: int, query_id: str) -> None:
        mine = self._by_conn.get(conn)
        if mine is None or query_id not in mine:
            return
        name = mine.pop(query_id)
        if not mine:
            del self._by_conn[conn]
        queries = self._by_map[name]
        del queries[(conn, query_id)]
        if not queries:
            del self._by_map[name]  # the name is forgotten with its last query
            self._todo.pop(name, None)
            self._dirty.pop(name, None)

    def disconnect(self, conn: int) -> None:
        for query_id in list(self._by_conn.get(conn, ())):
            self.unsubscribe(conn, query_id)

    def mark(self, map_name: str, keys: Iterable[str]) -> None:
        """Keys of ``map_name`` were written: its queries owe a look at them (``run``).
        Queries already waiting will see these keys too; the others queue up behind them."""
        queries = self._by_map.get(map_name)
        if not queries:
            return
        self._dirty.setdefault(map_name, set()).update(keys)
        todo = self._todo.setdefault(map_name, {})
        for qk in queries:
            todo.setdefault(qk, None)

    def pending(self) -> bool:
        return bool(self._todo)

    def run(
        self,
        budget: int,
        value_of: Callable[[str, str], bytes | None],
        items_of: Callable[[str], dict[str, bytes]],
    ) -> list[Change]:
        """The changes of queries whose maps were written, worked through until about
        ``budget`` rows have been looked at (a window recomputed counts every row of its
        map); what is left waits for the next call, so no write makes one call long. At
        least one query moves each call, and a key written twice before its query's turn is
        looked at once, with its value then. Queries with the same filter, sort and limit
        share one recomputation per call."""
        changes: list[Change] = []
        spent = moved = 0
        shared: dict[bytes, tuple[dict[str, bytes], dict[str, Any]]] = {}
        for name in list(self._todo):
            keys = {k: value_of(name, k) for k in self._dirty[name]}
            decoded = {k: (None if v is None else _DEC.decode(v)) for k, v in keys.items()}
            todo = self._todo[name]
            queries = self._by_map.get(name, {})
            rows: list[Row] | None = None
            shared.clear()
            while todo and (spent < budget or moved == 0):
                qk = next(iter(todo))
                del todo[qk]
                q = queries.get(qk)
                if q is None:
                    continue  # unsubscribed meanwhile
                moved += 1
                spent += len(keys)
                if not q.spec.limit:
                    self._unlimited(q, keys, decoded, changes)
                    continue
                new = self._slide(q, keys, decoded)
                if new is None:
                    spec = _ENC.encode(q.spec)
                    if spec in shared:
                        window, values = shared[spec]
                        new, q.decoded = dict(window), dict(values)
                    else:
                        if rows is None:
                            rows = decode_rows(items_of(name))
                        spent += len(rows)
                        new = q.window(rows)
                        shared[spec] = (new, q.decoded)
                self._diff(q, new, keys, changes)
            if todo:
                return changes  # the budget ran out inside this map
            del self._todo[name]
            del self._dirty[name]
            if spent >= budget:
                break
        return changes

    @staticmethod
    def _diff(
        q: Query, new: dict[str, bytes], keys: Mapping[str, bytes | None], changes: list[Change]
    ) -> None:
        for k in q.keys:
            if k not in new:
                changes.append((q.conn, q.query_id, k, None, "LEAVE"))
        for k, v in new.items():
            if k not in q.keys:
                changes.append((q.conn, q.query_id, k, v, "ENTER"))
            elif k in keys and q.keys[k] != v:
                changes.append((q.conn, q.query_id, k, v, "UPDATE"))
        q.keys = new

    @staticmethod
    def _slide(
        q: Query, keys: Mapping[str, bytes | None], decoded: Mapping[str, Any]
    ) -> dict[str, bytes] | None:
        """A limited query's new window from its old one and the written keys alone, or None
        when only the whole map can tell (a key left a full window, or sank to its edge).

        Every matching key outside a full window ranks after the window's last row, so the
        window stays right while no row of it leaves or falls behind that edge."""
        limit = q.spec.limit
        assert limit
        full = len(q.keys) >= limit
        edge: Any = None
        if full:
            last = next(reversed(q.keys))
            edge = q.rank((last, q.keys[last], q.decoded[last]))
        candidates: dict[str, Row] = {
            k: (k, v, q.decoded[k]) for k, v in q.keys.items() if k not in keys
        }
        touched = False
        for k, value in decoded.items():
            inside = k in q.keys
            now = value is not None and q.accepts(value)
            if not inside and not now:
                continue
            touched = True
            new_bytes = keys[k]
            if not now or new_bytes is None:
                if full:
                    return None  # its place may belong to a key outside the window
                continue
            row = (k, new_bytes, value)
            if inside and full and edge < q.rank(row):
                return None  # it may now rank behind a key outside the window
            candidates[k] = row
        if not touched:
            return q.keys
        kept = heapq.nsmallest(limit, candidates.values(), key=q.rank)
        q.decoded = {k: d for k, _, d in kept}
        return {k: v for k, v, _ in kept}

    @staticmethod
    def _unlimited(
        q: Query,
        keys: Mapping[str, bytes | None],
        decoded: Mapping[str, Any],
        changes: list[Change],
    ) -> None:
        """Without a limit a key's place in the result depends on that key alone."""
        for k, value in decoded.items():
            now = value is not None and q.accepts(value)
            new_bytes = keys[k]
            if k in q.keys and not now:
                del q.keys[k]
                changes.append((q.conn, q.query_id, k, None, "LEAVE"))
            elif now and new_bytes is not None:
                kind = "UPDATE" if k in q.keys else "ENTER"
                if q.keys.get(k) != new_bytes:
                    q.keys[k] = new_bytes
                    changes.append((q.conn, q.query_id, k, new_bytes, kind))
