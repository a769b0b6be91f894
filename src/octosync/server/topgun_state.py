"""The ``/topgun`` face's state: TopGun's core and the face around it, made per server.

Built by the face's declaration (``server.faces``): the core with this node's id (servers of
one cluster must never stamp alike), its maps back from the newest compaction plus the
journal after it, its event journal read from the journal, its op stream in a cluster, the
partition map's URLs once the port is bound, its part of ``/metrics``, its tick (lock expiry,
tombstone GC) and the threads it stops at shutdown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from octosync.cluster.maps import MapStats
from octosync.pipeline.resume import restart_records
from octosync.server.face_names import FaceName
from octosync.server.face_state import ClusterJoin, FaceLink, FaceState
from octosync.server.runtime import Runtime
from octosync.server.topgun_face import TopGunFace
from octosync.store.journal import Journal
from octosync.store.op_events import OpSource
from octosync.topgun import TopGunCore
from octosync.topgun.core import SERVER_NODE

if TYPE_CHECKING:
    from octosync.links.cluster_link import ClusterLink


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TopGunState(FaceState):
    def __init__(self, rt: Runtime) -> None:
        config = rt.config
        self.config = config
        self.core = TopGunCore(
            _wall_ms,
            persistent=rt.writer is not None,
            gc_age_ms=None if config.topgun_gc_age is None else int(config.topgun_gc_age * 1000),
            gc_every_ms=int(config.topgun_gc_interval * 1000),
            node_id=rt.node_id or SERVER_NODE,
            search_maps=config.topgun_search,
            vector_maps=config.topgun_vectors,
            sql=config.topgun_sql,
            index_inline=config.topgun_index_inline,
        )
        self.core.queries.per_connection = config.topgun_queries_per_connection
        self.core.queries.per_map = config.topgun_queries_per_map
        self.face = TopGunFace(
            self.core,
            rt.hub,
            rt.links,
            deliver=rt.deliver,
            commits=rt.commits,
            auth=config.auth,
            insecure_dev=config.insecure_dev,
            max_frame=rt.max_frame,
            data_dir=config.data_dir,
        )
        """The face: its flush timing, shared deflate and ways out (its sessions' port)."""

    def restore(self, journal: Journal) -> None:
        self.core.load(restart_records(journal, self.config.compaction_dir))
        self.core.journal = OpSource(journal)  # the event journal, read off the loop

    def join_cluster(self, join: ClusterJoin) -> Sequence[FaceLink]:
        """The maps' op stream (made after ``restore``: it starts from the journaled
        position)."""
        from octosync.links.cluster_maps import MapsLink

        link = MapsLink(self.face, join.link.node, cluster=join.cluster, settings=join.settings)
        self.face.replicator = link
        self.core.replicated = True
        self.core.acks_replicated = self.config.map_acks == "replicated"
        return (link,)

    def serving(self, base_url: str, cluster: ClusterLink | None) -> None:
        """The partition map's URLs: every node's, as the cluster's heartbeats say."""
        url = f"{base_url}/topgun"
        if cluster is not None:
            cluster.topgun_url = url
            self.core.nodes = cluster.topgun_nodes
        else:
            node = self.core.hlc.node_id
            self.core.nodes = lambda: [(node, url)]

    def follow(self, stream: str) -> None:
        self.face.follow_map(stream)  # only ``map:`` names; the rest are not TopGun's

    def tick(self) -> None:
        self.face.apply(self.core.tick())

    def metrics(self) -> Iterator[Metric]:
        feed = self.core.index_feed
        yield CounterMetricFamily(
            "octosync_topgun_index_written",
            "TopGun writes handed to the search indexes (numbered in order)",
            feed.written,
        )
        yield GaugeMetricFamily(
            "octosync_topgun_index_watermark",
            "TopGun writes searchable: every one numbered up to this (or a later write of its key)",
            feed.indexed,
        )
        yield GaugeMetricFamily(
            "octosync_topgun_index_waiting", "Keys waiting for the search indexer", len(feed)
        )
        replicator = self.face.replicator
        if replicator is not None:
            yield from map_metrics(replicator.stats, replicator.position)

    def close(self) -> None:
        self.face.close()


def topgun_state(rt: Runtime) -> TopGunState:
    """The server's one TopGun state (its sessions, HTTP sync and the app share it)."""
    return rt.face_state(FaceName.TOPGUN, TopGunState)


def map_metrics(stats: MapStats, position: int) -> Iterator[Metric]:
    """TopGun maps across the cluster: the op stream both ways, and anti-entropy."""
    for name, help_text, value in (
        ("published", "Op batches this node stored in the cluster's op stream", stats.published),
        ("republished", "Op batch publishes sent again for want of an ack", stats.republished),
        ("failed", "Op batches given up on (their writers were reset)", stats.failed),
        ("batches_in", "Op batches read from the op stream", stats.batches_in),
        ("applied", "Other nodes' op records that changed a map here", stats.applied),
        ("repaired", "Op records pulled by anti-entropy that changed a map here", stats.repaired),
        ("walks", "Anti-entropy pulls started", stats.walks),
        (
            "resubscribed",
            "Times the op stream was followed again after silence",
            stats.resubscribed,
        ),
        ("undecodable", "Op stream messages that did not decode", stats.undecodable),
        ("unreplayed", "Op stream messages gone before this node took them", stats.unreplayed),
    ):
        yield CounterMetricFamily(f"octosync_cluster_maps_{name}", help_text, value)
    yield GaugeMetricFamily(
        "octosync_cluster_maps_position", "The op stream's sequence taken up to", position
    )
