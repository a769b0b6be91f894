"""Shared documents across the cluster's nodes, over NATS: the I/O side of ``cluster/planes.py``.

It publishes the ops of each frame the local plane journaled to the JetStream stream
``octosync_<cluster>_planes`` (subject ``octosync.<cluster>.p``), once, and calls the plane back
when JetStream stored them (the plane then merges, fans out and acknowledges); it follows the
stream from the position this node journaled last, merging other nodes' batches through
``Plane.merge_remote`` (fanned out to this node's members, journaled); and it runs
anti-entropy: roots broadcast on ``octosync.<cluster>.pr``, repair requests to
``octosync.<cluster>.ps.<node>``.

Publishing is pipelined, one message per document per event-loop turn (every frame of that
turn, cut at a size bound). A publish that gets no ack is sent again with the same
``Nats-Msg-Id`` until ``replicate_timeout``; past it the writers waiting for that batch are
reset, as for a failed journal commit: what they were not told was stored, they send again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from octosync.cluster.planes import (
    Intake,
    PlaneStats,
    Repair,
    RepairTiming,
    Walk,
    answer,
    pack,
)
from octosync.crdt.plane import PlaneReplica
from octosync.errors import OctosyncError
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp
from octosync.links.jetstream_log import LogSettings, OpLogLink, Waiter
from octosync.wire import cluster_planes as wire

log = logging.getLogger("octosync.cluster.planes")


class PlanesHost(Protocol):
    """What the link uses of the server: its plane streams' replicas, the merge of remote ops
    (``server.plane.Plane``) and the connections to reset."""

    def replicas(self) -> Mapping[str, PlaneReplica]: ...

    def merge_remote(self, stream: str, ops: Sequence[CrdtOp], position: int | None) -> int: ...

    @property
    def replica_position(self) -> int: ...

    def fault(self, conn: int, err: OctosyncError) -> None: ...


@dataclass(slots=True)
class _Queued:
    ops: list[CrdtOp] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)


class PlanesLink(OpLogLink):
    """Replicates one server's shared documents through the cluster's NATS connection."""

    def __init__(
        self,
        host: PlanesHost,
        node: str,
        *,
        cluster: str,
        settings: LogSettings | None = None,
    ) -> None:
        prefix = f"octosync.{cluster}"
        super().__init__(
            node, settings or LogSettings(), f"octosync_{cluster}_planes", prefix + ".p"
        )
        self.host = host
        self.roots_subject = f"{prefix}.pr"
        self._sync = f"{prefix}.ps."
        self.intake = Intake(self.boot, host.replica_position)
        self.repair = Repair(
            node,
            time.monotonic,
            RepairTiming(interval=self.settings.sync_interval, settle=self.settings.settle),
        )
        self.stats: PlaneStats = PlaneStats()
        self._queue: dict[str, _Queued] = {}
        self._flush_due = False

    @property
    def position(self) -> int:
        return self.intake.position

    async def start(self, nc: NatsClient) -> None:
        """Replay the op stream from this node's journaled position, then follow it and serve
        repairs."""
        self.intake.position = max(self.intake.position, self.host.replica_position)
        await self._open(
            nc, {self.roots_subject: self._on_roots, self._sync + self.node: self._on_sync}
        )

    # --- publishing (the plane's side) ----------------------------------------------------------

    def replicate(
        self, conn: ConnId, stream: str, ops: Sequence[CrdtOp], then: Callable[[], None]
    ) -> None:
        """Publish ``ops`` (journaled here) and call ``then`` once JetStream stored them; a
        batch not stored in time resets ``conn``."""
        self.repair.written([stream])
        queued = self._queue.get(stream)
        if queued is None:
            queued = self._queue[stream] = _Queued()
        queued.ops.extend(ops)
        queued.waiters.append(Waiter(conn, then))
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Everything queued in this loop turn: one message per document (cut at the bound);
        each waiter's ``then`` once every message of its turn is stored."""
        self._flush_due = False
        queued, self._queue = self._queue, {}
        for stream, q in queued.items():
            batches = pack(q.ops)
            for w in q.waiters:
                w.pending = len(batches)
            for ops in batches:
                data = wire.encode(wire.PlaneBatch(self.boot, stream, ops))
                self._send(self.log_subject, data, q.waiters)

    def _fault(self, conn: int, err: OctosyncError) -> None:
        self.host.fault(conn, err)

    # --- the op stream (other nodes' batches) ---------------------------------------------------

    async def _on_batch(self, msg: Msg) -> None:
        try:
            seq = int(msg.metadata.sequence.stream)
            batch = wire.decode(msg.data)
        except (OctosyncError, ValueError) as exc:
            self.stats.undecodable += 1
            log.warning("cluster: an undecodable plane batch: %s", exc)
            return
        if not isinstance(batch, wire.PlaneBatch):
            return
        self.stats.batches_in += 1
        ops = self.intake.take(seq, batch)
        if not ops:
            return
        self.repair.written([batch.stream])
        self.stats.merged += self._merge(batch.stream, ops, self.intake.position)

    def _merge(self, stream: str, ops: Sequence[CrdtOp], position: int | None) -> int:
        try:
            return self.host.merge_remote(stream, ops, position)
        except OctosyncError as exc:  # a state that is not inline bytes: a node's bug
            self.stats.undecodable += 1
            log.warning("cluster: plane ops of %r not merged: %s", stream, exc)
            return 0

    # --- anti-entropy ---------------------------------------------------------------------------

    async def _round(self) -> None:
        if self.repair.due():
            roots = self.repair.roots(self.host.replicas())
            if roots and self._nc is not None:
                await self._nc.publish(
                    self.roots_subject, wire.encode(wire.PlaneRoots(self.node, roots))
                )

    async def _on_roots(self, msg: Msg) -> None:
        try:
            roots = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(roots, wire.PlaneRoots):
            return
        for walk in self.repair.heard(roots.node, roots.roots, self.host.replicas()):
            self.stats.walks += 1
            self._spawn(self._walk(walk))

    async def _walk(self, walk: Walk) -> None:
        """The peer's ops of every bucket whose digest differs, page by page."""
        replica = self.host.replicas().get(walk.stream) or PlaneReplica()

        def step(data: bytes) -> bytes | None:
            answer_ = wire.decode(data)
            if not isinstance(answer_, wire.RepairReply) or answer_.stream != walk.stream:
                return None
            if answer_.ops:
                self.stats.repaired += self._merge(walk.stream, answer_.ops, None)
            request = walk.on_reply(answer_)
            return None if request is None else wire.encode(request)

        await self._pull(
            self._sync + walk.peer,
            lambda: wire.encode(walk.start(self.repair.sums(walk.stream, replica))),
            step,
            f"{walk.stream!r} from {walk.peer}",
            lambda: self.repair.finished(walk),
        )

    async def _on_sync(self, msg: Msg) -> None:
        try:
            request = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(request, wire.RepairRequest):
            return
        replica = self.host.replicas().get(request.stream) or PlaneReplica()
        ours = self.repair.sums(request.stream, replica)
        reply = answer(request, replica, self.repair.timing.max_reply_bytes, ours)
        await msg.respond(wire.encode(reply))
