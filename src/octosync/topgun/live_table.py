"""The live subscriptions of one kind (searches, hybrid searches), per map and connection:
bounded per connection, with the keys written on each watched map since the last flush."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from octosync.errors import LimitExceeded

T = TypeVar("T")


class LiveTable(Generic[T]):
    def __init__(self, what: str, per_connection: int) -> None:
        self.what = what
        self.per_connection = per_connection
        self._live: dict[str, dict[tuple[int, str], T]] = {}
        self._changed: dict[str, set[str]] = {}

    def add(self, name: str, conn: int, sub_id: str, live: T) -> None:
        """Register (or replace) a subscription; refused past the per-connection bound."""
        subs = self._live.setdefault(name, {})
        mine = sum(1 for s in self._live.values() for c, _ in s if c == conn)
        if (conn, sub_id) not in subs and mine >= self.per_connection:
            raise LimitExceeded(
                f"at most {self.per_connection} {self.what} per connection",
                path="payload.subscriptionId",
            )
        subs[(conn, sub_id)] = live

    def any(self) -> bool:
        return any(self._live.values())

    def on(self, name: str) -> list[T]:
        return list(self._live.get(name, {}).values())

    def unsubscribe(self, conn: int, sub_id: str) -> None:
        for subs in self._live.values():
            subs.pop((conn, sub_id), None)

    def disconnect(self, conn: int) -> None:
        for subs in self._live.values():
            for key in [k for k in subs if k[0] == conn]:
                del subs[key]

    def written(self, name: str, keys: Iterable[str]) -> None:
        if self._live.get(name):
            self._changed.setdefault(name, set()).update(keys)

    def take_changed(self, only: Iterable[str] | None = None) -> dict[str, set[str]]:
        """The keys written per watched map since they were last taken (of the maps in
        ``only``, when given; the others stay for later)."""
        if only is None:
            changed, self._changed = self._changed, {}
            return changed
        return {name: self._changed.pop(name) for name in only if name in self._changed}
