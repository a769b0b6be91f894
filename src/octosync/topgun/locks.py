"""Named locks with queued waiters, TTL expiry and monotonic fencing tokens.

A request for a free lock is granted at once with a fencing token larger than every token
issued before (by any lock, and before a restart: the core journals the high-water mark,
``topgun.durable``), so a resource guarded by tokens can refuse a late writer whose lock
expired. A busy lock queues the request until it is released, its holder's TTL passes,
or the holder disconnects; a waiter whose own TTL passes first is dropped without a reply (the
real client reads an immediate refusal as a grant without a token, so silence is the safe
answer: it times out). Time is milliseconds from the caller.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DEFAULT_TTL_MS = 30_000
MAX_TTL_MS = 10 * 60_000


@dataclass(frozen=True, slots=True)
class Grant:
    conn: int
    request_id: str
    name: str
    fencing_token: int


@dataclass(slots=True)
class _Request:
    conn: int
    request_id: str
    ttl_ms: int
    asked_at: int


@dataclass(slots=True)
class _Lock:
    holder: _Request | None = None
    token: int = 0
    expires_at: int = 0
    waiters: deque[_Request] = field(default_factory=deque)


def clamp_ttl(ttl: int | None) -> int:
    return DEFAULT_TTL_MS if not ttl else min(int(ttl), MAX_TTL_MS)


class LockTable:
    def __init__(self) -> None:
        self._locks: dict[str, _Lock] = {}
        self._next_token = 1

    @property
    def last_token(self) -> int:
        """The highest fencing token granted so far (0: none)."""
        return self._next_token - 1

    def resume_after(self, token: int) -> None:
        """Grant only tokens above ``token`` from now on (a restart: the journaled high-water)."""
        self._next_token = max(self._next_token, token + 1)

    def holder(self, name: str) -> tuple[int, int] | None:
        """``(conn, fencing token)`` of the current holder."""
        lock = self._locks.get(name)
        if lock is None or lock.holder is None:
            return None
        return lock.holder.conn, lock.token

    def request(
        self, conn: int, request_id: str, name: str, ttl: int | None, now: int
    ) -> list[Grant]:
        """Queue a request; returns the grants it caused (this one, if the lock was free)."""
        lock = self._locks.setdefault(name, _Lock())
        lock.waiters.append(_Request(conn, request_id, clamp_ttl(ttl), now))
        return self._advance(name, lock, now)

    def release(self, conn: int, name: str, token: int, now: int) -> tuple[bool, list[Grant]]:
        """Release by the holder with its token: ``(released, grants to the next waiter)``."""
        lock = self._locks.get(name)
        if lock is None or lock.holder is None or lock.holder.conn != conn or lock.token != token:
            return False, []
        lock.holder = None
        return True, self._advance(name, lock, now)

    def disconnect(self, conn: int, now: int) -> list[Grant]:
        """Drop a connection's holds and waits; returns the grants that frees."""
        grants: list[Grant] = []
        for name, lock in list(self._locks.items()):
            lock.waiters = deque(w for w in lock.waiters if w.conn != conn)
            if lock.holder is not None and lock.holder.conn == conn:
                lock.holder = None
            grants.extend(self._advance(name, lock, now))
        return grants

    def expire(self, now: int) -> list[Grant]:
        """Holds past their TTL are released, waiters past theirs dropped; returns grants."""
        grants: list[Grant] = []
        for name, lock in list(self._locks.items()):
            grants.extend(self._advance(name, lock, now))
        return grants

    def _advance(self, name: str, lock: _Lock, now: int) -> list[Grant]:
        if lock.holder is not None and now >= lock.expires_at:
            lock.holder = None
        while lock.waiters and now >= lock.waiters[0].asked_at + lock.waiters[0].ttl_ms:
            lock.waiters.popleft()
        if lock.holder is not None or not lock.waiters:
            if lock.holder is None:
                del self._locks[name]
            return []
        nxt = lock.waiters.popleft()
        lock.holder = nxt
        lock.token = self._next_token
        self._next_token += 1
        lock.expires_at = now + nxt.ttl_ms
        return [Grant(nxt.conn, nxt.request_id, name, lock.token)]
