"""Hub core (sans-I/O): streams with producer authority, own mirror, bounded outboxes."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from octosync.hub.core import Hub
    from octosync.hub.model import (
        DiffFrame,
        GraphModel,
        ReplayModel,
        SnapshotFrame,
        lazily_frame,
    )
    from octosync.hub.outbox import Outbox, OutboxLimits
    from octosync.hub.policy import ERROR_POLICY, closes_connection
    from octosync.hub.types import AllowAll, Grants, HubConfig, OutFrame, ViewKey

_HOMES = {
    "Hub": "core",
    "DiffFrame": "model",
    "GraphModel": "model",
    "ReplayModel": "model",
    "SnapshotFrame": "model",
    "lazily_frame": "model",
    "Outbox": "outbox",
    "OutboxLimits": "outbox",
    "ERROR_POLICY": "policy",
    "closes_connection": "policy",
    "AllowAll": "types",
    "Grants": "types",
    "HubConfig": "types",
    "OutFrame": "types",
    "ViewKey": "types",
}

__all__ = [
    "ERROR_POLICY",
    "AllowAll",
    "DiffFrame",
    "Grants",
    "GraphModel",
    "Hub",
    "HubConfig",
    "OutFrame",
    "Outbox",
    "OutboxLimits",
    "ReplayModel",
    "SnapshotFrame",
    "ViewKey",
    "closes_connection",
    "lazily_frame",
]


def __getattr__(name: str) -> object:
    """The names above, imported on first use: the journal's records need only
    ``hub.limits``, and importing the whole core with it cost every pipeline command (which
    reads the journal) tens of milliseconds."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'octosync.hub' has no attribute {name!r}")
    return getattr(importlib.import_module(f"octosync.hub.{home}"), name)
