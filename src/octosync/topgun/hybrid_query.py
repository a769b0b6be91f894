"""``HYBRID_QUERY_SUBSCRIBE``: a live query whose predicate mixes full-text predicates with
the others (TopGun's ``client.hybridQuery``), on a map with a full-text index (sans-I/O).

The predicate is TopGun's tree (``topgun.queries``) plus its full-text leaves, each on one
``attribute``:

- ``match {query, matchOptions?}``: the attribute holds any of the query's words (all of
  them with ``operator: "and"``), scored by BM25 over the map's index, times ``boost``,
  dropped below ``minScore`` (``fuzziness`` is not applied);
- ``matchPhrase {query, slop?}``: the attribute holds the words in order, at most ``slop``
  other words between each two;
- ``matchPrefix {prefix}``: the attribute holds a word that starts with ``prefix``.

Each full-text leaf takes its best :data:`MAX_LEAF_HITS` records from the index, then checks
its attribute in the record as it is now. A leaf the whole predicate needs (at its top, or
under an ``and`` at its top) gives the candidates; a predicate with none (full text only
under ``or`` or ``not``) reads the whole map, so it is refused above
:data:`MAX_SCAN` records. A record's ``score`` is the sum of its full-text leaves' scores (a
leaf under ``not`` adds nothing), ``matchedTerms`` the words they matched. ``where`` is an
equality AND; ``sort`` (``{field: direction}`` or ``[{field, direction}]``, with TopGun's
``_score`` and ``_key``) orders the result, best score first without one; ``limit``
(1..:data:`MAX_RESULTS`) caps it and ``hasMore`` says there was more. Cursors are not served.

The answer is ``HYBRID_QUERY_RESP``; after each index commit of its map (every write of an
indexed map is committed within the indexer's gap) the query runs again, and each key that
entered, changed or left goes out as ``HYBRID_QUERY_DELTA`` (TopGun's two schemas for it).
A refusal is a ``HYBRID_QUERY_RESP`` with ``error`` and ``code``, never an uncorrelated
``ERROR``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Any

import msgspec

from octosync.crdt.sync_messages import NIL
from octosync.errors import DecodeError, FeatureDisabled, LimitExceeded
from octosync.topgun.live_table import LiveTable
from octosync.topgun.queries import OPERATORS, _check, _get, _order, matches
from octosync.topgun.search import MAX_QUERY_CHARS, FullText, Values, text_of, tokens
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv

FULL_TEXT_OPS = ("match", "matchPhrase", "matchPrefix")
MAX_LEAF_HITS = 200
"""Records each full-text leaf takes from the index, best first."""
MAX_LEAVES = 4
MAX_NODES = 256
MAX_SLOP = 16
MAX_RESULTS = 100
MAX_SCAN = 2_000
MAX_LIVE_PER_CONNECTION = 16
"""A live query runs again at each index commit of its map (at most every 200 ms): these
bounds keep what one connection's queries cost the loop then to a few milliseconds each."""
_DEC = msgspec.msgpack.Decoder()
_MISSING = object()

Items = Callable[[str], Mapping[str, bytes]]
"""A map's live values (key -> MsgPack bytes): read only without a needed full-text leaf."""


@dataclass(frozen=True, slots=True)
class _Leaf:
    """One full-text predicate, checked."""

    node_id: int
    kind: str
    attribute: str
    words: list[str]
    every: bool = False
    slop: int = 0
    boost: float = 1.0
    min_score: float = 0.0
    negated: bool = False

    def terms(self, data: Any) -> list[str] | None:
        """The words this leaf matched in ``data``'s attribute, None when it does not hold."""
        value = _get(data, self.attribute) if isinstance(data, dict) else _MISSING
        if value is _MISSING or value is None:
            return None
        held = tokens(text_of(value))
        if self.kind == "matchPrefix":
            found = sorted({t for t in held if t.startswith(self.words[0])})
            return found or None
        present = set(held)
        found = [w for w in dict.fromkeys(self.words) if w in present]
        if self.kind == "matchPhrase":
            return found if _in_order(held, self.words, self.slop) else None
        if not found or (self.every and len(found) < len(set(self.words))):
            return None
        return found


def _in_order(held: list[str], words: list[str], slop: int) -> bool:
    """``words`` appear in ``held`` in order, at most ``slop`` words between each two."""
    for start, token in enumerate(held):
        if token != words[0]:
            continue
        at, ok = start, True
        for word in words[1:]:
            window = held[at + 1 : at + 2 + slop]
            if word not in window:
                ok = False
                break
            at = at + 1 + window.index(word)
        if ok:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Spec:
    """A checked ``HYBRID_QUERY_SUBSCRIBE``."""

    map_name: str
    predicate: dict[str, Any] | None
    where: dict[str, Any] | None
    order: list[tuple[str, bool]]
    limit: int
    leaves: tuple[_Leaf, ...]
    needed: tuple[int, ...]
    """Node ids of the leaves every match must satisfy (candidates come from one of them)."""


def parse(p: rq.HybridQuerySubscribePayload, fulltext: FullText) -> Spec:
    """Check a subscription; a typed error naming the field refuses it."""
    if not fulltext.enabled(p.map_name):
        raise FeatureDisabled(
            f"full-text search is not enabled for map {p.map_name!r} (topgun_search)",
            path="payload.mapName",
        )
    if bytes(p.cursor) != bytes(NIL):
        raise FeatureDisabled("cursors of hybrid queries are not served", path="payload.cursor")
    predicate = _decoded(p.predicate, dict, "payload.predicate")
    where = _decoded(p.where, dict, "payload.where")
    leaves: list[_Leaf] = []
    needed: list[int] = []
    if predicate is not None:
        count = [0]
        _walk(predicate, "payload.predicate", leaves, needed, count, negated=False, top=True)
    limit = MAX_RESULTS if p.limit is None else int(p.limit)
    if not 0 < limit <= MAX_RESULTS:
        raise LimitExceeded(f"limit must be 1..{MAX_RESULTS}", path="payload.limit")
    return Spec(
        p.map_name, predicate, where, _order_of(p.sort), limit, tuple(leaves), tuple(needed)
    )


def _decoded(raw: msgspec.Raw, kind: type, path: str) -> Any:
    if bytes(raw) == bytes(NIL):
        return None
    value = _DEC.decode(bytes(raw))
    if not isinstance(value, kind):
        raise DecodeError(f"expected a {kind.__name__}", path=path)
    return value


def _walk(
    node: Any,
    path: str,
    leaves: list[_Leaf],
    needed: list[int],
    count: list[int],
    *,
    negated: bool,
    top: bool,
) -> None:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise LimitExceeded(f"a predicate has at most {MAX_NODES} nodes", path=path)
    if not isinstance(node, dict):
        raise DecodeError("a predicate is a map", path=path)
    op = node.get("op")
    if op in FULL_TEXT_OPS:
        leaf = _leaf(node, str(op), path, negated)
        if len(leaves) == MAX_LEAVES:
            raise LimitExceeded(f"at most {MAX_LEAVES} full-text predicates", path=path)
        leaves.append(leaf)
        if top:
            needed.append(leaf.node_id)
        return
    if op in ("and", "or", "not"):
        children = node.get("children") or []
        if not isinstance(children, list):
            raise DecodeError("children is a list", path=f"{path}.children")
        for i, child in enumerate(children):
            _walk(
                child,
                f"{path}.children[{i}]",
                leaves,
                needed,
                count,
                negated=negated != (op == "not"),
                top=top and op == "and",
            )
        return
    if op not in OPERATORS:
        raise DecodeError(
            f"a predicate needs an op among {(*OPERATORS, *FULL_TEXT_OPS)}", path=f"{path}.op"
        )
    _check(node, path)


def _leaf(node: dict[str, Any], op: str, path: str, negated: bool) -> _Leaf:
    attribute = node.get("attribute")
    if not isinstance(attribute, str) or not attribute:
        raise DecodeError("a full-text predicate names its attribute", path=f"{path}.attribute")
    field_name = "prefix" if op == "matchPrefix" else "query"
    text = node.get(field_name)
    if not isinstance(text, str):
        raise DecodeError(f"{op} needs a string {field_name}", path=f"{path}.{field_name}")
    if len(text) > MAX_QUERY_CHARS:
        raise LimitExceeded(
            f"a search query is at most {MAX_QUERY_CHARS} characters", path=f"{path}.{field_name}"
        )
    words = tokens(text)
    if not words or (op == "matchPrefix" and len(words) != 1):
        raise DecodeError(
            "a prefix is one word" if op == "matchPrefix" else "the query holds no word",
            path=f"{path}.{field_name}",
        )
    slop = node.get("slop") or 0
    if op == "matchPhrase" and (not isinstance(slop, int) or not 0 <= slop <= MAX_SLOP):
        raise DecodeError(f"slop must be 0..{MAX_SLOP}", path=f"{path}.slop")
    options = node.get("matchOptions") or {}
    if not isinstance(options, dict):
        raise DecodeError("matchOptions is a map", path=f"{path}.matchOptions")
    boost, min_score = options.get("boost", 1.0), options.get("minScore", 0.0)
    for name, number in (("boost", boost), ("minScore", min_score)):
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise DecodeError(f"{name} is a number", path=f"{path}.matchOptions.{name}")
    operator = options.get("operator", "or")
    if operator not in ("and", "or"):
        raise DecodeError('operator is "and" or "or"', path=f"{path}.matchOptions.operator")
    return _Leaf(
        id(node),
        op,
        attribute,
        words,
        every=operator == "and",
        slop=int(slop) if op == "matchPhrase" else 0,
        boost=float(boost),
        min_score=float(min_score),
        negated=negated,
    )


def _order_of(raw: msgspec.Raw) -> list[tuple[str, bool]]:
    if bytes(raw) == bytes(NIL):
        return []
    sort = _DEC.decode(bytes(raw))
    if isinstance(sort, dict):
        pairs = list(sort.items())
    elif isinstance(sort, list) and all(isinstance(s, dict) for s in sort):
        pairs = [(s.get("field"), s.get("direction", "asc")) for s in sort]
    else:
        raise DecodeError("sort is {field: direction} or [{field, direction}]", path="payload.sort")
    out = []
    for name, direction in pairs:
        if not isinstance(name, str) or str(direction).lower() not in ("asc", "desc"):
            raise DecodeError("sort is {field: asc | desc}", path="payload.sort")
        out.append((name, str(direction).lower() == "desc"))
    return out


Row = tuple[str, bytes, float, list[str]]
"""``(key, value bytes, score, matched terms)``."""


def run(spec: Spec, fulltext: FullText, values: Values, items: Items) -> tuple[list[Row], bool]:
    """The query's rows, in order, at most ``limit``; and whether there were more."""
    name = spec.map_name
    decoded: dict[str, Any] = {}

    def data_of(key: str, value: bytes) -> Any:
        if key not in decoded:
            decoded[key] = _DEC.decode(value)
        return decoded[key]

    found: dict[int, dict[str, tuple[float, list[str]]]] = {}
    for leaf in spec.leaves:
        hits: dict[str, tuple[float, list[str]]] = {}
        for key, score in fulltext.leaf_top(name, leaf.kind, leaf.words, leaf.slop, MAX_LEAF_HITS):
            value = values(name, key)
            terms = None if value is None else leaf.terms(data_of(key, value))
            if terms is not None and score * leaf.boost >= leaf.min_score:
                hits[key] = (score * leaf.boost, terms)
        found[leaf.node_id] = hits
    candidates: Iterable[tuple[str, bytes | None]]
    if spec.needed:
        anchor = min(spec.needed, key=lambda n: len(found[n]))
        candidates = ((key, values(name, key)) for key in sorted(found[anchor]))
    else:
        live = items(name)
        if len(live) > MAX_SCAN:
            raise LimitExceeded(
                f"a hybrid query without a full-text predicate it needs reads the whole map: "
                f"at most {MAX_SCAN} records",
                path="payload.predicate",
            )
        candidates = live.items()
    rows: list[Row] = []
    for key, value in candidates:
        if value is None:
            continue
        data = data_of(key, value)
        if spec.where and not _where(spec.where, data):
            continue
        if spec.predicate is not None and not _holds(spec.predicate, key, data, found):
            continue
        score, terms = 0.0, []
        for leaf in spec.leaves:
            hit = found[leaf.node_id].get(key)
            if hit is not None and not leaf.negated:
                score += hit[0]
                terms.extend(t for t in hit[1] if t not in terms)
        rows.append((key, value, score, terms))
    rows.sort(key=cmp_to_key(_comparer(spec.order)))
    return rows[: spec.limit], len(rows) > spec.limit


def _where(where: dict[str, Any], data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    return all(_get(data, k) is not _MISSING and _get(data, k) == v for k, v in where.items())


def _holds(
    node: dict[str, Any], key: str, data: Any, found: Mapping[int, Mapping[str, object]]
) -> bool:
    op = node.get("op")
    if op in FULL_TEXT_OPS:
        return key in found[id(node)]
    children = node.get("children") or []
    if op == "and":
        return all(_holds(c, key, data, found) for c in children)
    if op == "or":
        return any(_holds(c, key, data, found) for c in children)
    if op == "not":
        return not _holds(children[0], key, data, found) if children else True
    return matches(node, data)


def _comparer(order: list[tuple[str, bool]]) -> Callable[[Row, Row], int]:
    def field_of(row: Row, name: str, data: dict[str, Any]) -> Any:
        if name == "_score":
            return row[2]
        if name == "_key":
            return row[0]
        return _get(data.setdefault(row[0], _DEC.decode(row[1])), name)

    decoded: dict[str, Any] = {}

    def cmp(a: Row, b: Row) -> int:
        if not order:
            c = (a[2] < b[2]) - (a[2] > b[2])  # best score first
            return c or (a[0] > b[0]) - (a[0] < b[0])
        for name, desc in order:
            c = _order(field_of(a, name, decoded), field_of(b, name, decoded))
            if c:
                return -c if desc else c
        return (a[0] > b[0]) - (a[0] < b[0])

    return cmp


def _result(row: Row) -> rq.HybridQueryResult:
    key, value, score, terms = row
    return rq.HybridQueryResult(key, msgspec.Raw(value), score, terms)


@dataclass(slots=True)
class _Live:
    conn: int
    sub_id: str
    spec: Spec
    rows: dict[str, tuple[bytes, float, list[str]]] = field(default_factory=dict)


class LiveHybridQueries:
    """Live hybrid queries, run again after each index commit or write of their map."""

    def __init__(self) -> None:
        self._live: LiveTable[_Live] = LiveTable("live hybrid queries", MAX_LIVE_PER_CONNECTION)

    def any(self) -> bool:
        return self._live.any()

    def subscribe(
        self,
        conn: int,
        fulltext: FullText,
        p: rq.HybridQuerySubscribePayload,
        values: Values,
        items: Items,
    ) -> rq.HybridQueryResp:
        spec = parse(p, fulltext)
        rows, more = run(spec, fulltext, values, items)
        live = _Live(conn, p.subscription_id, spec, {k: (v, s, t) for k, v, s, t in rows})
        self._live.add(spec.map_name, conn, p.subscription_id, live)
        results = [_result(r) for r in rows]
        payload = rq.HybridQueryRespPayload(
            p.subscription_id, results, has_more=more, cursor_status="none"
        )
        return rq.HybridQueryResp(payload)

    def unsubscribe(self, conn: int, sub_id: str) -> None:
        self._live.unsubscribe(conn, sub_id)

    def disconnect(self, conn: int) -> None:
        self._live.disconnect(conn)

    def written(self, name: str, keys: Iterable[str]) -> None:
        self._live.written(name, keys)

    def flush(
        self, fulltext: FullText, values: Values, items: Items
    ) -> list[tuple[int, rq.HybridQueryDelta]]:
        out: list[tuple[int, rq.HybridQueryDelta]] = []
        for name in self._live.take_changed():
            for live in self._live.on(name):
                try:
                    rows, _more = run(live.spec, fulltext, values, items)
                except LimitExceeded:
                    continue  # the map outgrew a scan: the last result stands
                new = {k: (v, s, t) for k, v, s, t in rows}
                for key in live.rows.keys() - new.keys():
                    payload = rq.HybridQueryDeltaPayload(live.sub_id, key, "LEAVE")
                    out.append((live.conn, rq.HybridQueryDelta(payload)))
                for key, value, score, terms in rows:
                    old = live.rows.get(key)
                    if old == (value, score, terms):
                        continue
                    kind: sv.ChangeType = "ENTER" if old is None else "UPDATE"
                    payload = rq.HybridQueryDeltaPayload(
                        live.sub_id, key, kind, msgspec.Raw(value), score, terms
                    )
                    out.append((live.conn, rq.HybridQueryDelta(payload)))
                live.rows = new
        return out
