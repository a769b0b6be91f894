"""``/metrics``: Prometheus text read from the runtime's counters when scraped (no hot path)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from octosync.server.runtime import Runtime


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


def registry_for(runtime: Runtime) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
