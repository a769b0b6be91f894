"""Merkle trees of the compacted state, hash-compatible with ``crdt.MerkleTree`` (and TopGun).

The partitions of :mod:`.fold` each hash the winners of their keys (``crdt``'s entry hashes)
into leaf sums; the driver adds the partitions' shares of each leaf (at most ``16**depth`` per
map) and builds the inner levels with ``crdt.merkle.nodes_from_leaves``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from octosync.crdt.hashing import MASK32
from octosync.crdt.merkle import DEFAULT_DEPTH, node_path, nodes_from_leaves

TREE_SCHEMA = pa.schema(
    [("map", pa.string()), ("path", pa.string()), ("level", pa.int32()), ("hash", pa.int64())]
)


def tree_table(leaves: Iterable[tuple[str, int, int]], depth: int = DEFAULT_DEPTH) -> pa.Table:
    """Every non-zero node ``(map, path, level, hash)`` from ``(map, leaf, hash)`` rows (partial
    leaf sums, added here), leaves first and each map's root (``path == ""``) last."""
    per_map: dict[str, dict[int, int]] = {}
    for name, leaf, h in leaves:
        sums = per_map.setdefault(name, {})
        sums[leaf] = (sums.get(leaf, 0) + h) & MASK32
    rows: dict[str, list[object]] = {n: [] for n in TREE_SCHEMA.names}
    for name in sorted(per_map):
        for level, idx, h in nodes_from_leaves(per_map[name], depth):
            rows["map"].append(name)
            rows["path"].append(node_path(level, idx))
            rows["level"].append(level)
            rows["hash"].append(h)
    return pa.table(rows, schema=TREE_SCHEMA)


def merkle_roots(tree: pa.Table) -> dict[str, int]:
    """Each map's root from :func:`tree_table` (maps whose root is 0 have no row)."""
    return {
        name: h
        for name, level, h in zip(
            tree.column("map").to_pylist(),
            tree.column("level").to_pylist(),
            tree.column("hash").to_pylist(),
            strict=True,
        )
        if level == 0
    }
