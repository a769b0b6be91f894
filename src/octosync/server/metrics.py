"""``/metrics``: Prometheus text read from the runtime's counters when scraped (no hot path)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from octosync.cluster.core import ClusterCore
from octosync.cluster.holding import HeldStats, Holdings
from octosync.cluster.maps import MapStats
from octosync.cluster.planes import PlaneStats
from octosync.cluster.yjs import YjsClusterStats
from octosync.server.runtime import Runtime
from octosync.server.yjs_face import yjs_face
from octosync.store.journal import JournalHealth


class RuntimeCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    def collect(self) -> Iterator[Metric]:
        rt = self.rt
        conns = GaugeMetricFamily(
            "octosync_connections", "Open connections by face", labels=["face"]
        )
        frames_in = CounterMetricFamily(
            "octosync_frames_in", "Frames received by face", labels=["face"]
        )
        bytes_in = CounterMetricFamily(
            "octosync_bytes_in", "Bytes received by face", labels=["face"]
        )
        errors = CounterMetricFamily(
            "octosync_errors", "Typed errors sent to connections by face", labels=["face"]
        )
        for face, c in rt.counters.faces.items():
            conns.add_metric([face], c.connections)
            frames_in.add_metric([face], c.frames_in)
            bytes_in.add_metric([face], c.bytes_in)
            errors.add_metric([face], c.errors)
        yield conns
        yield frames_in
        yield bytes_in
        yield errors
        if rt.writer is not None:
            yield from _journal(rt.writer.health())
        stats = rt.hub.stats
        yield GaugeMetricFamily(
            "octosync_streams", "Streams known to the hub", len(rt.hub.stream_ids())
        )
        yield CounterMetricFamily(
            "octosync_frames_out", "Frames written to sockets", stats.frames_out
        )
        yield CounterMetricFamily("octosync_bytes_out", "Bytes written to sockets", stats.bytes_out)
        yield CounterMetricFamily(
            "octosync_writes",
            "Socket writes (each carries a coalesced batch)",
            rt.flusher.stats.writes,
        )
        yield CounterMetricFamily(
            "octosync_accepted_frames", "Frames accepted from producers", stats.frames_in
        )
        yield CounterMetricFamily(
            "octosync_rejected_frames", "Frames rejected by the hub", stats.rejected
        )
        yield CounterMetricFamily(
            "octosync_encodes", "Frame encodings (once per view)", stats.encodes
        )
        yield CounterMetricFamily(
            "octosync_dropped_frames", "Queued frames dropped by resets", stats.drops
        )
        yield CounterMetricFamily(
            "octosync_resets", "Subscribers reset to a snapshot", stats.resets
        )
        yield CounterMetricFamily(
            "octosync_coalesced_deltas", "Queued deltas replaced by a snapshot", stats.coalesced
        )
        yield GaugeMetricFamily(
            "octosync_outbox_depth", "Frames queued in outboxes", rt.hub.outbox_depth()
        )
        counters = rt.counters
        yield CounterMetricFamily(
            "octosync_refused_upgrades",
            "Upgrades refused for credentials",
            counters.refused_upgrades,
        )
        yield CounterMetricFamily(
            "octosync_refused_connections", "Connections refused by a cap", rt.guard.refused
        )
        yield CounterMetricFamily(
            "octosync_deadline_closes",
            "Connections closed for no request or handshake in time",
            counters.deadline_closes,
        )
        yield GaugeMetricFamily(
            "octosync_open_sockets", "Sockets counted by the guard", rt.guard.total
        )
        yield GaugeMetricFamily(
            "octosync_loop_lag_max_seconds", "Longest event-loop stall", counters.loop_lag_max
        )
        lag = CounterMetricFamily(
            "octosync_loop_stalls", "Event-loop stalls longer than a bound", labels=["over"]
        )
        for bound, count in counters.loop_stalls.items():
            lag.add_metric([f"{bound * 1000:g}ms"], count)
        yield lag
        feed = rt.topgun.index_feed
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
        if rt.cluster is not None:
            yield from cluster_metrics(rt.cluster)
        replicator = rt.topgun_face.replicator
        if replicator is not None:
            yield from map_metrics(replicator.stats, replicator.position)
        planes = rt.plane.replicator
        if planes is not None:
            yield from plane_metrics(planes.stats, planes.position)
        yjs = yjs_face(rt).replicator
        if yjs is not None:
            yield from yjs_metrics(yjs.stats, yjs.position)
        holder = rt.plane.holder
        if isinstance(holder, HeldView):
            yield from held_metrics(holder)
        if isinstance(replicator, HeldView):  # TopGun maps held by interest
            yield from held_metrics(replicator, "maps", "TopGun maps", "map")


def cluster_metrics(core: ClusterCore) -> Iterator[Metric]:
    """This node's part of the cluster: what it sent and took, its claims, its lag."""
    node = core.node
    yield GaugeMetricFamily(
        "octosync_cluster_nodes_alive",
        "Nodes this node hears (itself included)",
        len(core.nodes_alive()),
    )
    stats = core.stats
    for name, help_text, value in (
        ("published", "Frames this node published to the cluster", stats.published),
        ("received", "Frames received from other nodes", stats.received),
        ("applied", "Remote frames applied to this node's hub", stats.applied),
        ("stale", "Remote frames dropped as already applied", stats.stale),
        ("fenced", "Remote frames dropped from a superseded owner", stats.fenced),
        ("gaps", "Gaps seen in remote streams (each resynced from a snapshot)", stats.gaps),
        ("snapshot_requests", "Snapshots asked of owners", stats.snapshot_requests),
        ("claims_won", "Stream ownership claims won", stats.claims_won),
        ("claims_lost", "Stream ownership claims lost", stats.claims_lost),
        ("kicks", "Local producers refused for another node's ownership", stats.kicks),
        ("releases", "Stream ownerships released", stats.releases),
        ("takeovers", "Streams claimed from a node presumed dead", stats.takeovers),
    ):
        yield CounterMetricFamily(f"octosync_cluster_{name}", help_text, value)
    owned = GaugeMetricFamily(
        "octosync_cluster_owned_streams", "Streams this node owns", labels=["node"]
    )
    owned.add_metric([node], sum(1 for s in core.streams if core.owns(s) is not None))
    yield owned
    lag = GaugeMetricFamily(
        "octosync_cluster_lag_epochs",
        "Epochs this node's copy of a stream is behind its owner",
        labels=["stream"],
    )
    for stream in core.streams:
        behind = core.lag(stream)
        if behind is not None:
            lag.add_metric([stream], behind)
    yield lag


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


def yjs_metrics(stats: YjsClusterStats, position: int) -> Iterator[Metric]:
    """``/yjs`` documents across the cluster: their op stream both ways, and anti-entropy."""
    for name, help_text, value in (
        ("published", "Yjs update batches stored in the cluster's stream", stats.published),
        ("republished", "Yjs update batch publishes sent again", stats.republished),
        ("failed", "Yjs update batches given up on (writers reset)", stats.failed),
        ("batches_in", "Yjs update batches read from the stream", stats.batches_in),
        ("applied", "Other nodes' Yjs updates applied here", stats.applied),
        ("repaired", "Diffs from anti-entropy applied here", stats.repaired),
        ("pushed", "Diffs sent to a node whose document lacked them", stats.pushed),
        ("too_large", "Diffs not sent: past a round's byte bound", stats.too_large),
        ("resubscribed", "Times the Yjs stream was followed again", stats.resubscribed),
        ("undecodable", "Yjs cluster messages not applied", stats.undecodable),
        ("unreplayed", "Yjs stream messages gone before this node took them", stats.unreplayed),
    ):
        yield CounterMetricFamily(f"octosync_cluster_yjs_{name}", help_text, value)
    yield GaugeMetricFamily(
        "octosync_cluster_yjs_position", "The Yjs stream's sequence taken up to", position
    )


@runtime_checkable
class HeldView(Protocol):
    """A holder by interest (``links.cluster_held.HeldPlanesLink``,
    ``links.cluster_held_maps.HeldMapsLink``), as counted."""

    holdings: Holdings
    held_stats: HeldStats


def held_metrics(
    link: HeldView, kind: str = "documents", what: str = "Shared documents", one: str = "document"
) -> Iterator[Metric]:
    """What a node holds by interest (shared documents, or TopGun maps): how many, and the
    loads and releases behind it."""
    holdings = link.holdings
    yield GaugeMetricFamily(
        f"octosync_cluster_{kind}_held",
        f"{what} this node holds (loaded, used by its clients or idle)",
        len(holdings.held()),
    )
    yield GaugeMetricFamily(
        f"octosync_cluster_{kind}_loading",
        f"{what} being loaded from JetStream",
        len(holdings.loading()),
    )
    stats, snaps = holdings.stats, link.held_stats
    for name, help_text, value in (
        ("loads", f"Loads of a {one} started (its first client here)", stats.loads),
        ("loaded", f"Loads of a {one} that caught up", stats.loaded),
        ("releases", f"{what} let go after their idle time", stats.releases),
        ("load_failures", "Loads not done within the load timeout", stats.load_failures),
        ("snapshots", f"{one.capitalize()} snapshots written", snaps.snapshots),
        ("snapshots_too_large", "Snapshots over the payload bound", snaps.snapshots_too_large),
        ("snapshot_conflicts", "Snapshots left to a newer one", snaps.snapshot_conflicts),
    ):
        yield CounterMetricFamily(f"octosync_cluster_{kind}_{name}", help_text, value)


def _journal(health: JournalHealth) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "octosync_journal_available",
        "1 while journal commits succeed; 0 while they fail and writes are refused",
        int(health.available),
    )
    yield CounterMetricFamily(
        "octosync_journal_failed_commits", "Journal commits that failed", health.failed_commits
    )
    yield GaugeMetricFamily(
        "octosync_journal_unwritten_records",
        "Accepted records whose commit failed, waiting to be written again",
        health.unwritten,
    )


def registry_for(runtime: Runtime) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
