"""Ephemeral values: presence, awareness and a single expiring value (lazily-spec's
``PresenceCell``, ``AwarenessCell`` and ``EphemeralCell``).

Values here do not merge and are never durable: each peer's latest value lives until it
expires (``now >= expiry``) or, for presence, until its peer leaves (``evict``). Every call
takes ``now`` (the caller's clock, in any unit the TTLs share), and every mutation says
whether the live view changed, which is what a reader's invalidation follows (setting a peer
to the value it already holds changes nothing a reader sees).

Sans-I/O: a server keeps one ``PeerValues`` per document and kind, a client mirrors what the
server sends; neither reads a clock here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

V = TypeVar("V")


@dataclass(slots=True)
class _Held(Generic[V]):
    value: V
    expiry: float


class PeerValues(Generic[V]):
    """Each peer's latest value, expiring ``ttl`` after it was set (presence and awareness)."""

    __slots__ = ("_held", "ttl")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._held: dict[int, _Held[V]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, peer: object) -> bool:
        return peer in self._held

    def set(self, peer: int, value: V, now: float, ttl: float | None = None) -> bool:
        """Set (or refresh: a heartbeat) ``peer``'s value until ``now + ttl``; whether the
        live view changed."""
        held = self._held.get(peer)
        expiry = now + (self.ttl if ttl is None else ttl)
        self._held[peer] = _Held(value, expiry)
        return held is None or held.expiry <= now or held.value != value

    heartbeat = set
    """``PresenceCell``'s name for ``set``."""

    def evict(self, peer: int) -> bool:
        """Drop ``peer`` at once (it left); whether it was there."""
        return self._held.pop(peer, None) is not None

    def tick(self, now: float) -> list[int]:
        """Drop every value whose time is up; the peers dropped."""
        gone = [peer for peer, held in self._held.items() if held.expiry <= now]
        for peer in gone:
            del self._held[peer]
        return gone

    def get(self, peer: int, now: float) -> V | None:
        held = self._held.get(peer)
        return held.value if held is not None and held.expiry > now else None

    def present(self, now: float) -> dict[int, V]:
        """The live peer -> value map."""
        return {p: h.value for p, h in sorted(self._held.items()) if h.expiry > now}

    def next_expiry(self) -> float | None:
        return min((h.expiry for h in self._held.values()), default=None)


class ExpiringValue(Generic[V]):
    """One value that clears itself ``ttl`` after it was set (``EphemeralCell``)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: _Held[V] | None = None

    def set(self, value: V, now: float, ttl: float) -> bool:
        before = self.value(now)
        self._held = _Held(value, now + ttl)
        return bool(before != value)

    def tick(self, now: float) -> bool:
        """Clear the value once its time is up; whether it was cleared now."""
        if self._held is not None and self._held.expiry <= now:
            self._held = None
            return True
        return False

    def value(self, now: float) -> Any:
        held = self._held
        return held.value if held is not None and held.expiry > now else None
