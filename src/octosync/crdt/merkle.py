"""Merkle prefix trie over a map's keys, hash-compatible with TopGun.

A key is routed by the hex digits of ``fnv1a32(key)`` (``depth`` digits, 3 by default); a leaf
bucket holds ``key -> item hash`` and hashes to the fmix32 sum of its items; an inner node hashes
to the fmix32 sum of its children. Because the combine is a sum, a write changes every ancestor
by a difference: an update costs O(depth), never a walk over siblings or entries.

Nodes whose hash is 0 are not stored (and not listed by :meth:`MerkleTree.buckets`): fmix32(0) is
0, so an empty child and a missing child contribute the same to their parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from octosync.crdt import hashing
from octosync.crdt.hashing import (
    MASK32,
    fmix32,
    fmix32_many,
    fnv1a32,
    fnv1a32_many,
    lww_item_hash,
)
from octosync.crdt.timestamp import Timestamp
from octosync.errors import InvalidBucketPath, LocalProtocolError

if TYPE_CHECKING:
    from octosync.crdt.hashing import U32Array

DEFAULT_DEPTH = 3
"""TopGun's trie depth: 3 hex digits, 4,096 leaves per map (the pipeline uses the same)."""
MAX_DEPTH = 8
_HEX = "0123456789abcdef"


def leaf_indices(routes: U32Array, depth: int = DEFAULT_DEPTH) -> U32Array:
    """The leaf each route hash (``fnv1a32(key)``) lands in: its first ``depth`` hex digits."""
    import numpy as np

    return routes.astype(np.uint32) >> np.uint32(32 - 4 * depth)


def node_path(level: int, index: int) -> str:
    """The hex path of node ``index`` at ``level`` (``""`` for the root)."""
    return format(index, f"0{level}x") if level else ""


def nodes_from_leaves(
    leaves: Mapping[int, int], depth: int = DEFAULT_DEPTH
) -> list[tuple[int, int, int]]:
    """Every non-zero node ``(level, index, hash)`` of a tree given its leaf hashes.

    A leaf's hash is the fmix32 sum of its items, and sums of disjoint item sets add, so a
    distributed job can sum partial leaves and build the (at most ``16**depth``) inner nodes here,
    with the same combine :class:`MerkleTree` uses. Leaves come first, the root last.
    """
    out: list[tuple[int, int, int]] = []
    level_nodes = {idx: h & MASK32 for idx, h in leaves.items() if h & MASK32}
    for level in range(depth, -1, -1):
        out.extend((level, idx, h) for idx, h in sorted(level_nodes.items()))
        if level == 0:
            break
        up: dict[int, int] = {}
        for idx, h in level_nodes.items():
            up[idx >> 4] = (up.get(idx >> 4, 0) + fmix32(h)) & MASK32
        level_nodes = {idx: h for idx, h in up.items() if h}
    return out


class MerkleTree:
    """Incremental hex prefix trie of ``depth`` levels (``root()`` is level 0)."""

    __slots__ = ("_depth", "_leaves", "_levels", "_mixed", "_shift")

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        if not 1 <= depth <= MAX_DEPTH:
            raise LocalProtocolError(f"depth must be 1..{MAX_DEPTH}, got {depth}", path="depth")
        self._depth = depth
        self._shift = 32 - 4 * depth
        # _levels[level][prefix index] = node hash (non-zero only)
        self._levels: list[dict[int, int]] = [{} for _ in range(depth + 1)]
        self._mixed: list[dict[int, int]] = [{} for _ in range(depth + 1)]
        self._leaves: dict[int, dict[str, int]] = {}

    @property
    def depth(self) -> int:
        return self._depth

    @classmethod
    def from_items(cls, items: Iterable[tuple[str, int]], depth: int = DEFAULT_DEPTH) -> MerkleTree:
        tree = cls(depth)
        tree.set_items(list(items))
        return tree

    def copy(self) -> MerkleTree:
        twin = MerkleTree(self._depth)
        twin._levels = [dict(level) for level in self._levels]
        twin._mixed = [dict(level) for level in self._mixed]
        twin._leaves = {idx: dict(entries) for idx, entries in self._leaves.items()}
        return twin

    # -- writes ---------------------------------------------------------------------------

    def update(self, key: str, ts: Timestamp) -> None:
        """Record ``key`` at ``ts`` with TopGun's LWW entry hash ``key:millis:counter:nodeId``."""
        route = fnv1a32(key)
        self._set(key, route, lww_item_hash(key, ts.millis, ts.counter, ts.node_id, route))

    def update_many(self, items: Sequence[tuple[str, Timestamp]]) -> None:
        """``update`` for many keys at once, equal to calling it in order (a flush, a load).

        Hashes are computed vectorised (:func:`fnv1a32_many`) and each touched node is rehashed
        once per batch instead of once per key.
        """
        if not items:
            return
        keys = [key for key, _ in items]
        suffixes = [f":{ts.millis}:{ts.counter}:{ts.node_id}" for _, ts in items]
        if not hashing.VECTORISED:
            routes = [fnv1a32(key) for key in keys]
            entries = [fnv1a32(s, r) for s, r in zip(suffixes, routes, strict=True)]
            self._set_many_plain(keys, routes, entries)
            return
        vector_routes = fnv1a32_many(keys)
        self._set_many(keys, vector_routes, fnv1a32_many(suffixes, vector_routes))

    def set_items(self, items: Sequence[tuple[str, int]]) -> None:
        """``set_item`` for many keys at once, equal to calling it in order."""
        if not items:
            return
        keys = [key for key, _ in items]
        if not hashing.VECTORISED:
            routes = [fnv1a32(key) for key in keys]
            self._set_many_plain(keys, routes, [h & MASK32 for _, h in items])
            return
        import numpy as np

        hashes = np.array([h & MASK32 for _, h in items], np.uint32)
        self._set_many(keys, fnv1a32_many(keys), hashes)

    def _set_many_plain(self, keys: list[str], routes: list[int], item_hashes: list[int]) -> None:
        """``_set_many`` without NumPy (a base install): the same changes, key by key."""
        leaves, deltas = self._leaves, dict[int, int]()
        for key, route, h in zip(keys, routes, item_hashes, strict=True):
            idx = route >> self._shift
            entries = leaves.get(idx)
            if entries is None:
                entries = leaves[idx] = {}
            old = entries.get(key, 0)  # fmix32(0) == 0: an absent key adds nothing
            entries[key] = h
            deltas[idx] = deltas.get(idx, 0) + fmix32(h) - fmix32(old)
        self._propagate_many(deltas)

    def _set_many(self, keys: list[str], routes: U32Array, item_hashes: U32Array) -> None:
        import numpy as np

        leaves = self._leaves
        leaf_ids = leaf_indices(routes, self._depth).tolist()
        olds: list[int] = []
        for key, idx, h in zip(keys, leaf_ids, item_hashes.tolist(), strict=True):
            entries = leaves.get(idx)
            if entries is None:
                entries = leaves[idx] = {}
            olds.append(entries.get(key, 0))  # fmix32(0) == 0: an absent key adds nothing
            entries[key] = h
        change = fmix32_many(item_hashes).astype(np.int64) - fmix32_many(
            np.array(olds, np.uint32)
        ).astype(np.int64)
        touched, where = np.unique(np.array(leaf_ids, np.int64), return_inverse=True)
        deltas = np.zeros(len(touched), np.int64)
        np.add.at(deltas, where, change)
        self._propagate_many(dict(zip(touched.tolist(), deltas.tolist(), strict=True)))

    def _propagate_many(self, deltas: dict[int, int]) -> None:
        """:meth:`_propagate` for many leaves, one level at a time: a parent shared by several
        changed children is rehashed once, not once per child."""
        levels, mixed = self._levels, self._mixed
        for level in range(self._depth, 0, -1):
            nodes, mixes = levels[level], mixed[level]
            up: dict[int, int] = {}
            for idx, delta in deltas.items():
                delta &= MASK32
                if not delta:
                    continue
                new = (nodes.get(idx, 0) + delta) & MASK32
                if new:
                    nodes[idx] = new
                    new_mix = fmix32(new)
                    change = new_mix - mixes.get(idx, 0)
                    mixes[idx] = new_mix
                else:
                    del nodes[idx]
                    change = -mixes.pop(idx)
                up[idx >> 4] = up.get(idx >> 4, 0) + change
            deltas = up
        root = levels[0]
        new_root = (root.get(0, 0) + deltas.get(0, 0)) & MASK32
        if new_root:
            root[0] = new_root
        else:
            root.pop(0, None)

    def set_item(self, key: str, item_hash: int) -> None:
        """Record ``key`` with a precomputed 32-bit entry hash (OR-Map leaves, counters)."""
        self._set(key, fnv1a32(key), item_hash)

    def _set(self, key: str, route: int, item_hash: int) -> None:
        leaf_idx = route >> self._shift
        entries = self._leaves.get(leaf_idx)
        if entries is None:
            entries = self._leaves[leaf_idx] = {}
        old = entries.get(key)
        item_hash &= MASK32
        entries[key] = item_hash
        self._propagate(leaf_idx, fmix32(item_hash) - (0 if old is None else fmix32(old)))

    def remove(self, key: str) -> None:
        """Drop ``key`` (tombstone GC); absent keys are ignored."""
        leaf_idx = fnv1a32(key) >> self._shift
        entries = self._leaves.get(leaf_idx)
        if entries is None or key not in entries:
            return
        old = entries.pop(key)
        if not entries:
            del self._leaves[leaf_idx]
        self._propagate(leaf_idx, -fmix32(old))

    def _propagate(self, idx: int, delta: int) -> None:
        """Add ``delta`` to a leaf and carry each node's fmix32 change up to the root.

        ``_mixed`` caches ``fmix32`` of every stored node, so each level mixes only its new
        hash: one fmix32 per level per write.
        """
        levels, mixed = self._levels, self._mixed
        level = self._depth
        while delta:
            nodes = levels[level]
            old = nodes.get(idx, 0)
            new = (old + delta) & MASK32
            if level == 0:
                if new:
                    nodes[idx] = new
                else:
                    del nodes[idx]
                return
            mixes = mixed[level]
            if new:
                new_mix = fmix32(new)
                nodes[idx] = new
                delta = new_mix - mixes.get(idx, 0)
                mixes[idx] = new_mix
            else:
                del nodes[idx]
                delta = -mixes.pop(idx)
            idx >>= 4
            level -= 1

    # -- reads ----------------------------------------------------------------------------

    def root(self) -> int:
        return self._levels[0].get(0, 0)

    def leaf_hashes(self) -> dict[int, int]:
        """``leaf index -> hash`` of the non-empty leaves (see :func:`nodes_from_leaves`)."""
        return dict(self._levels[self._depth])

    def leaf_path(self, key: str) -> str:
        """The ``depth`` hex digits that route ``key`` to its leaf bucket."""
        return format(fnv1a32(key) >> self._shift, f"0{self._depth}x")

    def node_hash(self, path: str) -> int:
        level, idx = self._parse(path, allow_leaf=True)
        return self._levels[level].get(idx, 0)

    def buckets(self, path: str = "") -> dict[str, int]:
        """Non-zero child hashes of the inner node at ``path``, keyed by their hex digit."""
        level, idx = self._parse(path, allow_leaf=False)
        children = self._levels[level + 1]
        base = idx << 4
        out: dict[str, int] = {}
        for digit in range(16):
            h = children.get(base + digit)
            if h:
                out[_HEX[digit]] = h
        return out

    def leaf(self, path: str) -> dict[str, int]:
        """``key -> item hash`` of the leaf bucket at ``path`` (``depth`` hex digits)."""
        level, idx = self._parse(path, allow_leaf=True)
        if level != self._depth:
            raise InvalidBucketPath(
                f"a leaf path has {self._depth} hex digits, got {path!r}", path="path"
            )
        return dict(self._leaves.get(idx, {}))

    def items(self) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for entries in self._leaves.values():
            out.update(entries)
        return out

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._leaves.values())

    def _parse(self, path: str, *, allow_leaf: bool) -> tuple[int, int]:
        """``(level, prefix index)`` of a bucket path; TopGun's ``"0/1/2"`` form is accepted."""
        digits = path.replace("/", "").lower()
        limit = self._depth if allow_leaf else self._depth - 1
        if len(digits) > limit or any(c not in _HEX for c in digits):
            raise InvalidBucketPath(
                f"expected at most {limit} hex digits for a depth-{self._depth} tree, got {path!r}",
                path="path",
            )
        return len(digits), int(digits, 16) if digits else 0
