"""The ``/lazily`` face's state (and the lazily TCP and Unix-socket faces', which share it):
the shared documents' plane and the server's shared-memory region, made per server.

Built by the face's declaration (``server.faces``): the plane's documents back from the
journal (unless the cluster holds them by interest: then JetStream is their record), their op
stream in a cluster, this node's lazily URL for ``cluster status``, its part of ``/metrics``,
and the region it frees at shutdown. It is the lazily sessions' port (``LazilyPort``): the
runtime's hub and credentials, plus the plane, the region and the streams other faces make.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from octosync.cluster.planes import PlaneStats
from octosync.hub.crdt_streams import CrdtStreams
from octosync.server.durable_acks import DurableListener
from octosync.server.face_names import FaceName
from octosync.server.face_state import ClusterJoin, FaceLink
from octosync.server.held_metrics import HeldView, held_metrics
from octosync.server.plane import Plane
from octosync.server.ports import SessionHub
from octosync.server.runtime import Runtime
from octosync.server.served_state import ServedFaceState
from octosync.server.shared_blobs import ServerBlobs
from octosync.store.journal import Journal
from octosync.store.recovery import restore_planes

if TYPE_CHECKING:
    from octosync.links.cluster_held import HeldPlanesLink
    from octosync.links.cluster_link import ClusterLink

SEEDED = "documents-in-jetstream"
"""A file in the data folder: this node's journaled documents are in JetStream."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LazilyState(ServedFaceState):
    def __init__(self, rt: Runtime) -> None:
        config = rt.config
        super().__init__(rt)
        self.held = config.cluster_url is not None and config.cluster_hold == "interest"
        """Documents held by interest in a cluster: loaded from JetStream, not the journal."""
        streams = CrdtStreams(_wall_ms, away_ms=int(config.plane_member_away * 1000))
        self.plane = Plane(rt, streams, config.presence_ttl)
        """The multi-writer (CRDT plane) streams."""
        self.blobs = ServerBlobs(
            rt.hub, capacity=config.shm_capacity, threshold=config.shm_threshold
        )
        """Shared-memory payloads (``shared_blob``): the regions producers negotiated."""

    # -- the sessions' port (``server.ports.LazilyPort``) -------------------------------------

    @property
    def hub(self) -> SessionHub:
        return self.rt.hub

    @property
    def journaled(self) -> bool:
        return self.rt.journaled

    @property
    def durable_listeners(self) -> MutableMapping[int, DurableListener]:
        return self.rt.durable_listeners

    def wake(self, conn: int) -> None:
        self.rt.wake(conn)

    def follow_stream(self, stream: str) -> None:
        """A subscriber asked for ``stream``: a face that makes it (TopGun's ``map:``) starts."""
        self.rt.follow(stream)

    # -- hooks ---------------------------------------------------------------------------------

    def restore(self, journal: Journal) -> None:
        if not self.held:
            restore_planes(journal, self.plane.core)

    def join_cluster(self, join: ClusterJoin) -> Sequence[FaceLink]:
        """The documents' op stream (after ``restore``: its position), or, held by
        interest, a subject per document; and the members' presence between nodes."""
        from octosync.links.cluster_planes import PlanesLink
        from octosync.links.cluster_presence import PresenceLink

        plane, node, config = self.plane, join.link.node, self.rt.config
        presence = PresenceLink(plane, node, cluster=join.cluster)
        plane.presence_carrier = presence  # members' presence, node to node
        if not self.held:
            link = PlanesLink(plane, node, cluster=join.cluster, settings=join.settings)
            plane.replicator = link
            return (link, presence)
        from octosync.links.cluster_held import HeldPlanesLink
        from octosync.links.held_subjects import HoldSettings

        hold = HoldSettings(
            idle=config.document_idle,
            load_timeout=config.document_load_timeout,
            snapshot_interval=config.document_snapshot_interval,
        )
        held = HeldPlanesLink(plane, node, cluster=join.cluster, settings=join.settings, hold=hold)
        plane.holder, plane.replicator, plane.journal_remote = held, held, False
        if join.journal is not None:  # documents journaled before they were held by interest
            seed_journaled(held, join.journal, config.data_dir / SEEDED)
        join.link.documents = held.held
        return (held, presence)

    def serving(self, base_url: str, cluster: ClusterLink | None) -> None:
        if cluster is not None:
            cluster.public_url = f"{base_url}/lazily"

    def metrics(self) -> Iterator[Metric]:
        planes = self.plane.replicator
        if planes is not None:
            yield from plane_metrics(planes.stats, planes.position)
        holder = self.plane.holder
        if isinstance(holder, HeldView):
            yield from held_metrics(holder)

    def close(self) -> None:
        self.blobs.close()


def lazily_state(rt: Runtime) -> LazilyState:
    """The server's one lazily state (its sessions on every transport share it)."""
    return rt.face_state(FaceName.LAZILY, LazilyState)


def seed_journaled(link: HeldPlanesLink, journal: Journal, marker: Path) -> None:
    """Once per data folder, the documents of the journal (from when every node held every
    document) go to JetStream when the link starts, so nodes that hold by interest load them."""
    if marker.exists():
        return
    streams = CrdtStreams(lambda: 0)
    restore_planes(journal, streams)
    documents = {n: s.replica.ops() for n, s in streams.streams.items() if len(s.replica)}
    link.seed(documents, marker.touch)


def plane_metrics(stats: PlaneStats, position: int) -> Iterator[Metric]:
    """Shared documents across the cluster: their op stream both ways, and anti-entropy."""
    for name, help_text, value in (
        ("published", "Plane op batches stored in the cluster's stream", stats.published),
        ("republished", "Plane op batch publishes sent again", stats.republished),
        ("failed", "Plane op batches given up on (writers reset)", stats.failed),
        ("batches_in", "Plane op batches read from the stream", stats.batches_in),
        ("merged", "Other nodes' ops that changed a document here", stats.merged),
        ("repaired", "Ops pulled by anti-entropy that changed a document here", stats.repaired),
        ("walks", "Plane anti-entropy pulls started", stats.walks),
        ("resubscribed", "Times the plane stream was followed again", stats.resubscribed),
        ("undecodable", "Plane stream messages not merged", stats.undecodable),
        ("unreplayed", "Plane stream messages gone before this node took them", stats.unreplayed),
    ):
        yield CounterMetricFamily(f"octosync_cluster_planes_{name}", help_text, value)
    yield GaugeMetricFamily(
        "octosync_cluster_planes_position", "The plane stream's sequence taken up to", position
    )
