"""TopGun's partition map (``PARTITION_MAP_REQUEST`` / ``PARTITION_MAP``), sans-I/O.

TopGun's cluster client hashes each key to one of :data:`PARTITION_COUNT` partitions (FNV-1a of
the key, :func:`partition_of`) and sends it to the partition's owner, falling back to its first
seed. In an octosync cluster every node takes every write (each node's accepted ops reach all
the others through the cluster's op stream), so the map only says where a client sends its
writes, and the node a client asks names *itself* the owner of every partition (the other
nodes, in id order after it, as backups): each client writes to one node, its first seed, and
clients spread over the nodes by the seeds they are given.

Why not partitions dealt over the nodes, as TopGun's server deals them: TopGun's client marks
every pending op with an id up to an ``OP_ACK``'s ``lastId`` synced, whichever node sent the
ack (``SyncEngine.handleOpAck``), and resends all pending ops on each write, split by owner. With
keys spread over two nodes, an ack from one covers the other's ops still in flight or queued;
when that other node is killed, the client drops writes no node took (measured: 55 to 81 of
260 to 310 writes in each of five runs that killed the first seed). With one owner per client,
every op of a client goes to one node in order, so an ack covers only ops that node received.

Each node is listed with the URL clients reach its ``/topgun`` at (the ``advertised_url``
setting), which must be the URL a client was given as a seed for the client to recognise it.

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

    def payload(self, now_ms: int, owner: str) -> sv.PartitionMapPayload:
        """The map as TopGun's ``PARTITION_MAP`` carries it, every partition owned by
        ``owner`` (the node answering) when it is alive (no node known: no partitions)."""
        ids = [node for node, _ in self._nodes]
        partitions = []
        if ids:
            first = ids.index(owner) if owner in ids else 0
            order = ids[first:] + ids[:first]
            head, backups = order[0], order[1 : 1 + BACKUPS]
            partitions = [sv.PartitionInfo(pid, head, backups) for pid in range(PARTITION_COUNT)]
        nodes = [sv.NodeInfo(node, sv.NodeEndpoints(url), "ACTIVE") for node, url in self._nodes]
        return sv.PartitionMapPayload(self.version, PARTITION_COUNT, nodes, partitions, now_ms)
