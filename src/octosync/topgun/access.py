"""A TopGun connection's state in the core, and the checks every request makes of its grants."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from octosync.crdt.op import MAX_MAP_NAME
from octosync.errors import DecodeError, Forbidden, LimitExceeded
from octosync.topgun import durable
from octosync.topgun.effects import Grants

TOPIC_NAME = re.compile(r"^[A-Za-z0-9_\-.:/]{1,256}$")


@dataclass(slots=True)
class Conn:
    """One connection: who it is, the maps it has open and the topics it follows."""

    grants: Grants
    maps: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)


def require_map(c: Conn, name: str, action: str) -> None:
    """Refuse a map name out of bounds, the server's own maps, and what the token forbids."""
    if not 0 < len(name) <= MAX_MAP_NAME:
        raise LimitExceeded(
            f"a map name has 1 to {MAX_MAP_NAME} characters, not {len(name)}",
            path="payload.mapName",
        )
    if durable.is_reserved(name):
        raise Forbidden(
            f"map names starting with {durable.RESERVED_PREFIX!r} are the server's own",
            path="payload.mapName",
        )
    require(c.grants.may_map(name, action), f"{action} the map", name)


def require(allowed: bool, what: str, name: str) -> None:
    if not allowed:
        raise Forbidden(f"the token does not allow to {what} {name!r}", path="payload")


def topic_name(name: str) -> None:
    if not TOPIC_NAME.match(name):
        raise DecodeError("a topic name is 1-256 of A-Z a-z 0-9 _ - . : /", path="payload.topic")
