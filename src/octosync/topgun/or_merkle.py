"""TopGun's OR-map Merkle entry hash, so the real client's root compares equal to ours.

An entry hashes ``"key:<key>|<tag>:<value>:<millis>:<counter>:<node>[:ttl=<ms>]|..."`` (live
records ordered by tag) with FNV-1a-32 over UTF-16 code units; the value part is JavaScript's
``String(value)`` for scalars and ``JSON.stringify(value, sortedTopLevelKeys)`` for objects
(client ``core/src/ORMapMerkle.ts``). Keys route and nodes combine as in the LWW tree. Where a
value's JavaScript rendering is not reproduced exactly (exotic floats), the hashes differ and
sync still converges: the client walks down to the leaf and both sides merge its records.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from octosync.crdt.fold import MapStore
from octosync.crdt.hashing import fnv1a32
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.op import OpRecord

_DEC = msgspec.msgpack.Decoder()


def js_number(x: float) -> str:
    """``String(x)`` in JavaScript."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    text = repr(x)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        text = f"{mantissa}e{sign}{exp.lstrip('+-').lstrip('0')}"
    return text


def _json(value: Any, allowed: list[str] | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "null"
        return js_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json(v, allowed) for v in value) + "]"
    if isinstance(value, dict):
        names = allowed if allowed is not None else list(value)
        parts = [
            f"{json.dumps(k, ensure_ascii=False)}:{_json(value[k], allowed)}"
            for k in names
            if k in value
        ]
        return "{" + ",".join(parts) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def js_value_string(value: Any) -> str:
    """``stringifyValue`` of the client: how a record's value enters the entry hash."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return _json(value, sorted(str(k) for k in value))
    if isinstance(value, list):
        return _json(value, [str(i) for i in range(len(value))])
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return js_number(value)
    return str(value)


def entry_hash(key: str, live: list[OpRecord]) -> int:
    parts = [f"key:{key}"]
    for rec in sorted(live, key=lambda r: r.op_id):
        value = js_value_string(_DEC.decode(rec.value))
        ts = rec.ts
        parts.append(f"{rec.op_id}:{value}:{ts.millis}:{ts.counter}:{ts.node_id}")
    return fnv1a32("|".join(parts))


class ORTrees:
    """One TopGun OR Merkle tree per OR map, brought up to date for the keys written since."""

    def __init__(self, store: MapStore, depth: int = 3) -> None:
        self._store = store
        self._depth = depth
        self._trees: dict[str, MerkleTree] = {}
        self._dirty: dict[str, set[str]] = {}

    def touched(self, map_name: str, key: str) -> None:
        self._dirty.setdefault(map_name, set()).add(key)

    def forget(self, map_name: str) -> None:
        self._trees.pop(map_name, None)
        self._dirty.pop(map_name, None)

    def tree(self, map_name: str) -> MerkleTree:
        tree = self._trees.get(map_name)
        if tree is None:
            tree = self._trees[map_name] = MerkleTree(self._depth)
            keys: set[str] = set(self._store.or_keys(map_name))
        else:
            keys = self._dirty.get(map_name, set())
        self._dirty.pop(map_name, None)
        for key in keys:
            live, _ = self._store.or_entry(map_name, key)
            if live:
                tree.set_item(key, entry_hash(key, live))
            else:
                tree.remove(key)
        return tree
