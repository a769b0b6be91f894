"""TopGun-compatible 32-bit hashes: FNV-1a over UTF-16 code units and the fmix32 sum combine.

Both are part of the wire contract (a TopGun peer must compute the same Merkle root), so the
arithmetic is fixed: FNV offset 0x811c9dc5, prime 0x01000193, iterating UTF-16 code units as
JavaScript's ``charCodeAt`` does; nodes combine children as the wrapping sum of MurmurHash3's
fmix32 of each child, which makes the combine order-free and lets a parent be updated by
subtracting a child's old contribution and adding its new one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from hashlib import blake2b
from typing import TYPE_CHECKING

from octosync.extras import importable

if TYPE_CHECKING:  # NumPy is optional (the pipeline extra brings it): imported where used
    import numpy as np
    import numpy.typing as npt

    U32Array = npt.NDArray[np.uint32]

VECTORISED = importable("numpy")
"""Batches of hashes use NumPy when it is installed (``*_many``); without it, the Merkle tree
hashes a batch key by key with the same results (``MerkleTree._set_many``)."""

MASK32 = 0xFFFFFFFF
FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def fnv1a32(text: str, h: int = FNV_OFFSET) -> int:
    """FNV-1a-32 of ``text`` taken as UTF-16 code units (ASCII takes the byte fast path).

    ``h`` continues from an earlier state: ``fnv1a32(b, fnv1a32(a)) == fnv1a32(a + b)``, so a
    key's route hash is reused for its ``key:millis:counter:nodeId`` entry hash.
    """
    units: Iterable[int] = (
        text.encode("ascii")
        if text.isascii()
        else memoryview(text.encode(_UTF16, "surrogatepass")).cast("H")
    )
    prime, mask = FNV_PRIME, MASK32  # locals: this loop is the hot path of every Merkle write
    for unit in units:
        h = ((h ^ unit) * prime) & mask
    return h


def fnv1a32_many(texts: Sequence[str], seeds: U32Array | None = None) -> U32Array:
    """``fnv1a32`` of many texts at once (``seeds[i]`` continues text ``i``, as ``h`` does).

    A Merkle flush hashes thousands of keys; FNV is sequential within a text but independent
    across texts, so this steps code unit ``j`` of every text long enough in one NumPy operation
    (texts sorted by length, so the active rows are a prefix): ``max length`` vector steps
    instead of ``total length`` interpreted ones. uint32 arithmetic wraps mod 2^32 by itself.
    """
    import numpy as np

    n = len(texts)
    h = np.full(n, FNV_OFFSET, np.uint32) if seeds is None else seeds.astype(np.uint32)
    if n == 0:
        return h
    joined = "".join(texts)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), np.uint8)
        lengths = np.fromiter(map(len, texts), np.int64, n)
    else:
        raw = [t.encode(_UTF16, "surrogatepass") for t in texts]
        units = np.frombuffer(b"".join(raw), np.uint16)
        lengths = np.fromiter((len(r) >> 1 for r in raw), np.int64, n)
    width = int(lengths.max())
    if width == 0:
        return h
    order = np.argsort(-lengths, kind="stable")
    grid = np.zeros((n, width), np.uint32)
    grid[np.arange(width) < lengths[:, None]] = units  # row i: text i's units, zero padded
    columns = np.ascontiguousarray(grid[order].T)
    active = np.searchsorted(-lengths[order], -np.arange(width), side="left")
    hs = h[order]
    prime = np.uint32(FNV_PRIME)
    for j in range(width):
        c = active[j]
        hs[:c] = (hs[:c] ^ columns[j, :c]) * prime
    out = np.empty_like(hs)
    out[order] = hs
    return out


def fmix32_many(hs: U32Array) -> U32Array:
    """``fmix32`` of every element (uint32 in, uint32 out)."""
    import numpy as np

    h = hs.astype(np.uint32)
    h ^= h >> 16
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> 13
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> 16
    return h


def fmix32(h: int) -> int:
    """MurmurHash3's finaliser; ``fmix32(0) == 0`` keeps empty children neutral in a sum."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK32
    h ^= h >> 16
    return h


def combine(hashes: Iterable[int]) -> int:
    """Order-free combine of child hashes: sum of ``fmix32`` mod 2^32 (empty input is 0)."""
    total = 0
    for h in hashes:
        total += fmix32(h)
    return total & MASK32


def lww_item_hash(
    key: str, millis: int, counter: int, node_id: str, key_hash: int | None = None
) -> int:
    """The LWW leaf entry hash TopGun uses: FNV-1a of ``key:millis:counter:nodeId``.

    Pass ``key_hash = fnv1a32(key)`` when it is already known to skip re-hashing the key.
    """
    if key_hash is None:
        key_hash = fnv1a32(key)
    return fnv1a32(f":{millis}:{counter}:{node_id}", key_hash)


def key_digest64(key: str) -> bytes:
    """8-byte BLAKE2b digest of ``key`` (UTF-8, lone surrogates passed through).

    Names a key in a leaf digest (octosync's sync extension, not TopGun's hashing): 64 bits so
    that two keys of one leaf practically never share a digest, at a tenth of a key's size.
    """
    return blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
