"""TopGun-compatible 32-bit hashes: FNV-1a over UTF-16 code units and the fmix32 sum combine.

Both are part of the wire contract (a TopGun peer must compute the same Merkle root), so the
arithmetic is fixed: FNV offset 0x811c9dc5, prime 0x01000193, iterating UTF-16 code units as
JavaScript's ``charCodeAt`` does; nodes combine children as the wrapping sum of MurmurHash3's
fmix32 of each child, which makes the combine order-free and lets a parent be updated by
subtracting a child's old contribution and adding its new one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from hashlib import blake2b

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
        text.encode("ascii") if text.isascii() else memoryview(text.encode(_UTF16)).cast("H")
    )
    prime, mask = FNV_PRIME, MASK32  # locals: this loop is the hot path of every Merkle write
    for unit in units:
        h = ((h ^ unit) * prime) & mask
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
