"""The faces' names and the names of the token claims they read.

``FaceName`` is one enum, so a counter, a metric label or an authority decision never reads a
face from a spelling convention. ``GrantTable`` names one claim of the token and the actions
it may grant; ``CLAIM_TABLES`` is every one the token parser (``server.auth``) reads. The
registry (``server.faces``) says which face reads which; this module carries only names, so
low modules (auth, the runtime's counters, the sessions) use them without importing the faces.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FaceName(StrEnum):
    """A face as counted and labelled (``octosync_connections{face=...}``)."""

    LAZILY = "lazily"
    TCP = "tcp"
    """Lazily over plain TCP (``--tcp-port``)."""
    WVP = "wvp"
    SIGNAL = "signal"
    DATASPACE = "dataspace"
    """Syndicate's protocol, on ``/dataspace`` and ``--dataspace-port`` alike."""
    TOPGUN = "topgun"
    CHAIN = "chain"
    YJS = "yjs"
    """y-websocket on ``/yjs/NAME`` and Hocuspocus on ``/yjs``."""


@dataclass(frozen=True, slots=True)
class GrantTable:
    """One claim of the token: a map of name -> actions, each action drawn from ``actions``."""

    claim: str
    actions: frozenset[str]


STREAMS = GrantTable("streams", frozenset({"read", "publish", "write", "trigger_effect"}))
ROOMS = GrantTable("rooms", frozenset({"join"}))
MAPS = GrantTable("maps", frozenset({"read", "write"}))
TOPICS = GrantTable("topics", frozenset({"subscribe", "publish"}))
LOCKS = GrantTable("locks", frozenset({"acquire"}))
COUNTERS = GrantTable("counters", frozenset({"read", "write"}))
YJS = GrantTable("yjs", frozenset({"read", "write"}))
"""Yjs documents by name (patterns as for streams)."""
CLAIM_TABLES = (STREAMS, ROOMS, MAPS, TOPICS, LOCKS, COUNTERS, YJS)
"""Every table a token may carry, parsed and checked at the upgrade (a test holds it equal to
the union of the faces' ``grants``)."""
