"""asyncio clients: ``/lazily`` (subscribe, publish a Context, shared documents), ``/wvp`` and
``/signal``."""

from octosync.client.lazily import Backoff, Client, Publication, State, Subscription, connect
from octosync.client.shared import SharedDocument, open_document
from octosync.client.signaling import SignalingClient, SignalingRefused
from octosync.client.wvp import WvpClient

__all__ = [
    "Backoff",
    "Client",
    "Publication",
    "SharedDocument",
    "SignalingClient",
    "SignalingRefused",
    "State",
    "Subscription",
    "WvpClient",
    "connect",
    "open_document",
]
