"""Octosync servers as a cluster over NATS: what crosses between nodes, sans-I/O (``core``)."""

from octosync.cluster.core import ClusterCore, ClusterStats, ClusterTiming

__all__ = ["ClusterCore", "ClusterStats", "ClusterTiming"]
