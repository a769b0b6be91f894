"""asyncio clients: ``/lazily`` (subscribe, publish a Context), ``/wvp`` and ``/signal``."""

from octosync.client.lazily import Backoff, Client, Publication, State, Subscription, connect
from octosync.client.signaling import SignalingClient, SignalingRefused
from octosync.client.wvp import WvpClient

__all__ = [
    "Backoff",
    "Client",
    "Publication",
    "SignalingClient",
    "SignalingRefused",
    "State",
    "Subscription",
    "WvpClient",
    "connect",
]
