"""A face's per-server state and the hooks the app and the run loop call on it.

Each face that keeps state (a core, documents, a relay) declares how it is made in the
registry (``server.faces``: ``Face.state``); the runtime keeps what was made, ticks it once a
second and closes it at shutdown, and ``build_app``, ``server.run`` and ``server.metrics``
call the hooks below on every face's state in turn, so none of them names a face. A hook a
face does not need keeps its default, which does nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import Metric

from octosync.store.journal import Journal

if TYPE_CHECKING:  # NATS comes with the cluster extra: imported only by a server that clusters
    from nats.aio.client import Client as NatsClient

    from octosync.links.cluster_link import ClusterLink
    from octosync.links.jetstream_log import LogSettings


class FaceLink(Protocol):
    """A face's side of the cluster (an op stream in JetStream): started once the node joined,
    before the port opens; stopped before the node leaves."""

    async def start(self, nc: NatsClient) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClusterJoin:
    """What a face's cluster link is made from: the node's link, its op streams' settings and
    the journal (None: no journal)."""

    link: ClusterLink
    cluster: str
    settings: LogSettings
    journal: Journal | None


class FaceState:
    """One face's state in one server; subclasses override the hooks they need."""

    def restore(self, journal: Journal) -> None:
        """Before the port opens: take back what the journal holds of this face."""

    def join_cluster(self, join: ClusterJoin) -> Sequence[FaceLink]:
        """In a cluster, after ``restore`` (the links start from the journaled position):
        this face's links, which the app starts in order and stops in reverse."""
        return ()

    def serving(self, base_url: str, cluster: ClusterLink | None) -> None:
        """The HTTP port is bound: ``base_url`` is the address clients use."""

    def follow(self, stream: str) -> None:
        """A lazily client subscribes to ``stream``: a face that produces it starts now."""

    def tick(self) -> None:
        """Once a second (lock expiry, tombstone GC)."""

    def metrics(self) -> Iterator[Metric]:
        """This face's part of ``/metrics``."""
        return iter(())

    def close(self) -> None:
        """At shutdown, after every connection closed: stop its threads, free its regions."""
