"""``/metrics`` of what a node holds by interest, whatever it is: shared documents (the lazily
face, ``octosync_cluster_documents_*``) or TopGun maps (``octosync_cluster_maps_*``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from octosync.cluster.holding import HeldStats, Holdings


@runtime_checkable
class HeldView(Protocol):
    """A holder by interest (``links.cluster_held.HeldPlanesLink``,
    ``links.cluster_held_maps.HeldMapsLink``), as counted."""

    holdings: Holdings
    held_stats: HeldStats


def held_metrics(
    link: HeldView, kind: str = "documents", what: str = "Shared documents", one: str = "document"
) -> Iterator[Metric]:
    """How many ``kind`` this node holds, and the loads and releases behind it."""
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
