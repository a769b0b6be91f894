"""Test helpers: a plain-Python Merkle reference and op-row builders (no Spark inside)."""

from __future__ import annotations

from typing import Any

import msgspec

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.op_table import OPS_SCHEMA
from octosync.store.op_table import op_row as table_row


def fnv1a32_utf16(text: str) -> int:
    h = 0x811C9DC5
    raw = text.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h ^= (raw[i] << 8) | raw[i + 1]
        h = (h * 0x01000193) % 2**32
    return h


def fmix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    return h ^ (h >> 16)


def reference_tree(entries: list[tuple[str, int]], depth: int = 3) -> dict[str, int]:
    """Path -> hash of every non-zero node, built top-down from (key, entry hash) pairs."""
    nodes: dict[str, int] = {}
    leaves: dict[str, int] = {}
    for key, entry in entries:
        path = f"{fnv1a32_utf16(key):08x}"[:depth]
        leaves[path] = (leaves.get(path, 0) + fmix32(entry)) % 2**32
    nodes.update(leaves)
    level = leaves
    for d in range(depth - 1, -1, -1):
        up: dict[str, int] = {}
        for path, h in level.items():
            up[path[:d]] = (up.get(path[:d], 0) + fmix32(h)) % 2**32
        nodes.update(up)
        level = up
    return {p: h for p, h in nodes.items() if h}


def op_row(
    seq: int,
    map_name: str,
    key: str,
    op: str,
    value: Any,
    millis: int,
    counter: int,
    node: str,
    op_id: str,
) -> dict[str, Any]:
    raw = value if isinstance(value, bytes) else msgspec.msgpack.encode(value)
    rec = OpRecord(map_name, key, OpKind(op), raw, Timestamp(millis, counter, node), node, op_id)
    return table_row(rec, seq)


def ops_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(
        [tuple(r[n] for n in OPS_SCHEMA.names) for r in rows], from_arrow_schema(OPS_SCHEMA)
    )
