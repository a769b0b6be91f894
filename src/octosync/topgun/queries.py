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

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Any

import msgspec

from octosync.errors import DecodeError

_DEC = msgspec.msgpack.Decoder()
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


def _like(pattern: str) -> re.Pattern[str]:
    body = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", re.IGNORECASE | re.DOTALL)


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
    if op == "like":
        return _like(target).match(value) is not None
    if op == "regex":
        try:
            return re.search(target, value) is not None
        except re.error:
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


@dataclass(slots=True)
class Query:
    conn: int
    query_id: str
    map_name: str
    spec: QuerySpec
    keys: dict[str, bytes] = field(default_factory=dict)
    """Current result: key -> value bytes, in result order."""

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, dict):
            return self.spec.where is None and self.spec.predicate is None
        if self.spec.where and any(
            _get(value, k) is _MISSING or _get(value, k) != v for k, v in self.spec.where.items()
        ):
            return False
        return self.spec.predicate is None or matches(self.spec.predicate, value)

    def window(self, items: Mapping[str, bytes]) -> dict[str, bytes]:
        """The result over ``items`` (key -> MsgPack value): filtered, sorted, limited."""
        rows = [(k, v, _DEC.decode(v)) for k, v in items.items()]
        rows = [r for r in rows if self.accepts(r[2])]
        order = _sort_keys(self.spec)

        def cmp(a: tuple[str, bytes, Any], b: tuple[str, bytes, Any]) -> int:
            for name, desc in order:
                x, y = _get(a[2], name), _get(b[2], name)
                c = _order(x, y)
                if c:
                    return -c if desc else c
            return (a[0] > b[0]) - (a[0] < b[0])

        rows.sort(key=cmp_to_key(cmp))
        if self.spec.limit:
            rows = rows[: self.spec.limit]
        return {k: v for k, v, _ in rows}


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
    def __init__(self) -> None:
        self._by_map: dict[str, dict[tuple[int, str], Query]] = {}

    def watched(self) -> set[str]:
        """The maps some live query is on."""
        return {name for name, queries in self._by_map.items() if queries}

    def subscribe(self, query: Query, items: Mapping[str, bytes]) -> dict[str, bytes]:
        query.keys = query.window(items)
        self._by_map.setdefault(query.map_name, {})[(query.conn, query.query_id)] = query
        return query.keys

    def unsubscribe(self, conn: int, query_id: str) -> None:
        for queries in self._by_map.values():
            queries.pop((conn, query_id), None)

    def disconnect(self, conn: int) -> None:
        for queries in self._by_map.values():
            for key in [k for k in queries if k[0] == conn]:
                del queries[key]

    def written(
        self, map_name: str, keys: Mapping[str, bytes | None], items: Callable[[], dict[str, bytes]]
    ) -> list[Change]:
        """Keys of ``map_name`` changed (value bytes, None when removed): the changes of every
        query on that map. ``items`` gives the map's live values, asked only if needed."""
        queries = self._by_map.get(map_name)
        if not queries:
            return []
        decoded = {k: (None if v is None else _DEC.decode(v)) for k, v in keys.items()}
        changes: list[Change] = []
        snapshot: dict[str, bytes] | None = None
        for q in queries.values():
            if q.spec.limit:
                touched = any(
                    k in q.keys or (v is not None and q.accepts(v)) for k, v in decoded.items()
                )
                if not touched:
                    continue
                if snapshot is None:
                    snapshot = items()
                new = q.window(snapshot)
                for k in q.keys:
                    if k not in new:
                        changes.append((q.conn, q.query_id, k, None, "LEAVE"))
                for k, v in new.items():
                    if k not in q.keys:
                        changes.append((q.conn, q.query_id, k, v, "ENTER"))
                    elif k in keys and q.keys[k] != v:
                        changes.append((q.conn, q.query_id, k, v, "UPDATE"))
                q.keys = new
                continue
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
        return changes
