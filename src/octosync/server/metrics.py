"""``/metrics``: Prometheus text read from the runtime's counters when scraped (no hot path).

The runtime's own counters, the hub's, the journal's and the cluster's, then each face's part
(``FaceState.metrics``): this module names no face."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from octosync.cluster.core import ClusterCore
from octosync.server.runtime import Runtime
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
        if rt.cluster is not None:
            yield from cluster_metrics(rt.cluster)
        for state in rt.states():  # each face's own part (``FaceState.metrics``)
            yield from state.metrics()


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
