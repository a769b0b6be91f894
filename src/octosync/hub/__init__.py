"""Hub core (sans-I/O): streams with producer authority, own mirror, bounded outboxes."""

from octosync.hub.core import Hub
from octosync.hub.model import DiffFrame, GraphModel, ReplayModel, SnapshotFrame, lazily_frame
from octosync.hub.outbox import Outbox, OutboxLimits
from octosync.hub.policy import ERROR_POLICY, closes_connection
from octosync.hub.types import AllowAll, Grants, HubConfig, OutFrame, ViewKey

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
