"""TopGun's partition map (``PARTITION_MAP_REQUEST`` / ``PARTITION_MAP``), sans-I/O.

TopGun's cluster client hashes each key to one of :data:`PARTITION_COUNT` partitions (FNV-1a of
the key, :func:`partition_of`) and sends it to the partition's owner, falling back to a backup
and then to any node. In an octosync cluster every node takes every write (each node's
accepted ops reach all the others through the cluster's op stream), so the map only spreads
clients' writes: partitions are dealt round-robin over the nodes alive now, sorted by id (as
TopGun's server deals them), each with the next node as its backup. A single server answers
a map of itself. Each node is listed with the URL clients reach its ``/topgun`` at (the
``advertised_url`` setting), which must be the URL a client was given as a seed for the client
to recognise it.

The version moves whenever the set of nodes changes, to at least the wall-clock second of the
change, so nodes that see the same change at nearly the same time hand out nearly the same
version, and a later view always has a higher one (the client keeps the highest it saw).
"""

from __future__ import annotations

from collections.abc import Iterable

from octosync.wire import topgun_services as sv

PARTITION_COUNT = 271
BACKUPS = 1
"""Backup nodes per partition (fewer when fewer nodes are alive)."""


def partition_of(key: str) -> int:
    """The partition TopGun's client routes ``key`` to (FNV-1a over UTF-16 code units)."""
    h = 2166136261
    units = key.encode("utf-16-le")
    for i in range(0, len(units), 2):
        h ^= units[i] | units[i + 1] << 8
        h = (h * 16777619) & 0xFFFFFFFF
    return h % PARTITION_COUNT


class PartitionTable:
    def __init__(self) -> None:
        self.version = 0
        self._nodes: tuple[tuple[str, str], ...] = ()

    def observe(self, nodes: Iterable[tuple[str, str]], now_ms: int) -> None:
        """The nodes alive now, ``(node id, WebSocket URL)``; a change moves the version."""
        seen = tuple(sorted(dict(nodes).items()))
        if seen != self._nodes:
            self._nodes = seen
            self.version = max(self.version + 1, now_ms // 1000)

    def payload(self, now_ms: int) -> sv.PartitionMapPayload:
        """The map as TopGun's ``PARTITION_MAP`` carries it (no node known: no partitions)."""
        ids = [node for node, _ in self._nodes]
        n = len(ids)
        partitions = []
        if n:
            for pid in range(PARTITION_COUNT):
                owner = pid % n
                backups = [ids[(owner + i) % n] for i in range(1, min(BACKUPS, n - 1) + 1)]
                partitions.append(sv.PartitionInfo(pid, ids[owner], backups))
        nodes = [sv.NodeInfo(node, sv.NodeEndpoints(url), "ACTIVE") for node, url in self._nodes]
        return sv.PartitionMapPayload(self.version, PARTITION_COUNT, nodes, partitions, now_ms)
