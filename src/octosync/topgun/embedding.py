"""Text to vectors for the TopGun face's vector index: a pluggable provider.

The built-in provider is deterministic and needs no model: feature hashing of the words (each
lower-cased word adds +1 or -1 to one of ``dim`` coordinates, both chosen by its BLAKE2b hash),
normalised to unit length, so texts sharing words point the same way and a restart embeds
every record exactly as before. A server that wants a learned model passes another
:class:`Embedder` (any object with ``dim`` and ``embed``) to ``TopGunCore``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Protocol

from octosync.topgun.search import tokens


class Embedder(Protocol):
    @property
    def dim(self) -> int: ...

    def embed(self, text: str) -> list[float] | None:
        """The text's vector (``dim`` floats), None when it has nothing to embed."""
        ...


class HashingEmbedder:
    def __init__(self, dim: int = 64) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, text: str) -> list[float] | None:
        vec = [0.0] * self._dim
        words = tokens(text)
        if not words:
            return None
        for word in words:
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vec[h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vec))
        return None if norm == 0 else [x / norm for x in vec]
