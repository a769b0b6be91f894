"""Test helpers: a plain-Python Merkle reference, op-row and frame builders, Parquet rows and
listening addresses (no Spark inside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pyarrow.parquet as pq

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.op_table import OPS_SCHEMA
from octosync.store.op_table import op_row as table_row
from octosync.store.records import StreamFrame


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


def frame(stream: str, base: int, epoch: int, snapshot: bool) -> StreamFrame:
    return StreamFrame(
        stream=stream,
        base_epoch=base,
        epoch=epoch,
        snapshot=snapshot,
        payload=b"P",
        state_hash=f"{stream}{epoch}".encode(),
    )


def sorted_rows(directory: Path) -> list[tuple[Any, ...]]:
    """Every row of a Parquet directory, sorted (outputs compared across modes)."""
    table = pq.read_table(directory)
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
"""127.0.0.1, ::ffff:127.0.0.1 and ::1 as /proc/net/tcp* writes them."""


def listen_addresses(port: int) -> set[str]:
    """The local addresses (hex, as in /proc/net/tcp*) on which something listens on ``port``."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].partition(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def assert_same_compaction(out: Path, local: Any, journal: Path, stdout: str) -> None:
    """``out`` (a compaction made elsewhere: a cluster, a Connect server) holds what the local
    ``compact.run`` result ``local`` wrote, and both equal the in-process fold of ``journal``."""
    import json

    from octosync.crdt.fold import fold
    from octosync.store.journal import Journal

    meta = json.loads((out / "compaction.json").read_text())
    assert meta["merkle_roots"] == local.roots
    assert (meta["rows"], meta["ops"], meta["as_of_seq"]) == (
        local.rows,
        local.ops,
        local.as_of_seq,
    )
    for part in ("snapshot", "merkle", "records"):
        assert sorted_rows(out / part) == sorted_rows(Path(local.out) / part), part
    with Journal(journal, readonly=True) as j:
        store = fold(list(j.all_ops()))
    assert meta["merkle_roots"] == {m: store.merkle_root(m) for m in store.maps()}
    for name, root in meta["merkle_roots"].items():
        assert f"{name}: merkle root {root}" in stdout
