"""Connection lifecycles as data (h11-style): each face's states and the events that move them.

A session asks its ``Lifecycle`` to ``move(event)``; an event its current state does not allow
is a ``LocalProtocolError`` (a bug in the session, never the peer's fault: the session checks
the peer's frame against the state first and answers the peer with a typed error).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar

from octosync.errors import LocalProtocolError

S = TypeVar("S", bound=Enum)


class Lifecycle(Generic[S]):
    __slots__ = ("state", "table")

    def __init__(self, table: Mapping[tuple[S, str], S], initial: S) -> None:
        self.table = table
        self.state = initial

    def allows(self, event: str) -> bool:
        return (self.state, event) in self.table

    def move(self, event: str) -> S:
        try:
            self.state = self.table[(self.state, event)]
        except KeyError:
            raise LocalProtocolError(
                f"{event!r} is not allowed in state {self.state.name}", path="state"
            ) from None
        return self.state
