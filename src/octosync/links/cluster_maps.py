"""TopGun maps across the cluster's nodes, over NATS: the I/O side of ``cluster/maps.py``.

It publishes each batch of op records the local TopGun core accepted to the JetStream stream
``octosync_<cluster>_maps`` (subjects ``octosync.<cluster>.m.<map>``, map names as unpadded
base64url, ``replicas`` as configured), once, and resolves ``REPLICATED`` acks with
JetStream's publish acks; it follows the stream from the position this node journaled last,
folding other nodes' batches through ``TopGunCore.apply_remote`` (journaled, fanned out to this
node's subscribers); and it runs anti-entropy: roots broadcast on ``octosync.<cluster>.mr``,
repair requests to ``octosync.<cluster>.ms.<node>``.

Publishing is pipelined (JetStream's async publish), one message per map per event-loop turn
(the batches of every session in that turn, cut at a size bound). A publish that gets no ack is
sent again with the same ``Nats-Msg-Id`` (JetStream drops the duplicate) until
``replicate_timeout``; past it, the connections waiting for that batch are reset, as for a
failed journal commit: what they were not told was stored, their client sends again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from octosync.cluster.maps import (
    DEFAULT_MAX_BATCH_BYTES,
    Intake,
    MapStats,
    Repair,
    RepairTiming,
    Walk,
    answer,
    pack,
)
from octosync.crdt.op import OpRecord
from octosync.errors import OctosyncError
from octosync.ipc.messages import Delta, Snapshot
from octosync.links.cluster_link import Faultable, stream_of, token
from octosync.links.jetstream_log import LogSettings, OpLogLink, Waiter
from octosync.store.commit_path import Commit, CommitPath
from octosync.store.records import EncodedRecord
from octosync.topgun import Effects, Outbound, TopGunCore
from octosync.topgun.durable import is_reserved
from octosync.wire import cluster_maps as wire

log = logging.getLogger("octosync.cluster.maps")


class MapSubjects:
    def __init__(self, cluster: str) -> None:
        prefix = f"octosync.{cluster}"
        self.stream = f"octosync_{cluster}_maps"
        self.ops = f"{prefix}.m.>"
        self.roots = f"{prefix}.mr"
        self._ops = f"{prefix}.m."
        self._sync = f"{prefix}.ms."

    def map(self, name: str) -> str:
        return self._ops + token(name)

    def name_of(self, subject: str) -> str:
        """The map a subject of :meth:`map` stands for."""
        return stream_of(subject[len(self._ops) :])

    def sync(self, node: str) -> str:
        return self._sync + node


@dataclass(slots=True)
class _Queued:
    name: str
    bodies: list[bytes]
    waiter: Waiter


class MapsHost(Protocol):
    """What the maps link uses of the server (``server.topgun_face.TopGunFace``): the TopGun core,
    the journal, the connections to reset, and the TopGun face's ways out."""

    @property
    def topgun(self) -> TopGunCore: ...

    @property
    def commits(self) -> CommitPath: ...

    @property
    def links(self) -> Mapping[int, Faultable]: ...

    def deliver_all(self, out: Sequence[Outbound]) -> None: ...

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None: ...

    def flush_soon(self) -> None: ...


class MapsLink(OpLogLink):
    """Replicates one server's TopGun maps through the cluster's NATS connection."""

    def __init__(
        self,
        runtime: MapsHost,
        node: str,
        *,
        cluster: str,
        settings: LogSettings | None = None,
    ) -> None:
        self.subjects = MapSubjects(cluster)
        super().__init__(node, settings or LogSettings(), self.subjects.stream, self.subjects.ops)
        self.rt = runtime
        self.intake = Intake(self.boot, runtime.topgun.replica_position)
        self.repair = Repair(
            node,
            time.monotonic,
            RepairTiming(interval=self.settings.sync_interval, settle=self.settings.settle),
        )
        self.stats: MapStats = MapStats()
        self._queue: list[_Queued] = []
        self._flush_due = False
        self._incoming: list[OpRecord] = []
        self._apply_due = False
        self._journal_ok = True
        """False after a journal submit failed: positions stop being journaled, so a restart
        replays from before the records that were not stored."""

    @property
    def position(self) -> int:
        return self.intake.position

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, nc: NatsClient) -> None:
        """Replay the op stream from this node's journaled position, then follow it and serve
        repairs (anti-entropy repairs what a purge of the stream took with it)."""
        self.intake.position = max(self.intake.position, self.rt.topgun.replica_position)
        self.repair.know(self.rt.topgun.maps.store.maps())
        handlers = {
            self.subjects.roots: self._on_roots,
            self.subjects.sync(self.node): self._on_sync,
        }
        await self._open(nc, handlers)
        self._apply_incoming()

    # --- publishing (the session's side) --------------------------------------------------------

    def replicate(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None] | None
    ) -> None:
        """Publish ``records`` (op records the local core accepted) and call ``then`` once
        JetStream stored all of them; a batch not stored in time resets ``conn``."""
        batches = pack(records)
        self.repair.written(name for name, _ in batches)
        if not batches:
            if then is not None:  # later, as a store would: replies sent before go first
                asyncio.get_running_loop().call_soon(then)
            return
        waiter = Waiter(conn, then)
        self._queue.extend(_Queued(name, bodies, waiter) for name, bodies in batches)
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Everything queued in this loop turn: one message per map (cut at the size bound)."""
        self._flush_due = False
        queued, self._queue = self._queue, []
        by_map: dict[str, list[_Queued]] = {}
        for q in queued:
            by_map.setdefault(q.name, []).append(q)
        for name, items in by_map.items():
            bodies: list[bytes] = []
            waiters: dict[int, Waiter] = {}
            size = 0
            for q in items:
                for body in q.bodies:
                    if bodies and size + len(body) > DEFAULT_MAX_BATCH_BYTES:
                        self._send_map(name, bodies, list(waiters.values()))
                        bodies, waiters, size = [], {}, 0
                    if id(q.waiter) not in waiters:
                        q.waiter.pending += 1
                        waiters[id(q.waiter)] = q.waiter
                    bodies.append(body)
                    size += len(body)
            if bodies:
                self._send_map(name, bodies, list(waiters.values()))

    def _send_map(self, name: str, bodies: list[bytes], waiters: list[Waiter]) -> None:
        self._send(self.subjects.map(name), wire.encode_batch(self.boot, bodies), waiters)

    def _fault(self, conn: int, err: OctosyncError) -> None:
        link = self.rt.links.get(conn)
        if link is not None:
            link.fault(err)

    # --- the op stream (other nodes' batches) ---------------------------------------------------

    async def _on_batch(self, msg: Msg) -> None:
        try:
            seq = int(msg.metadata.sequence.stream)
            batch = wire.decode(msg.data)
        except (OctosyncError, ValueError) as exc:
            self.stats.undecodable += 1
            log.warning("cluster: an undecodable map batch on %s: %s", msg.subject, exc)
            return
        if not isinstance(batch, wire.OpBatch):
            return
        self.stats.batches_in += 1
        self._incoming.extend(self.intake.take(seq, batch))
        if not self._apply_due:
            self._apply_due = True
            asyncio.get_running_loop().call_soon(self._apply_incoming)

    def _apply_incoming(self) -> None:
        """The batches read in this loop turn, applied at once, with the position after them."""
        self._apply_due = False
        records, self._incoming = self._incoming, []
        position = self.intake.position if self._journal_ok else None
        if position is not None and position <= self.rt.topgun.replica_position and not records:
            return
        fx = self.rt.topgun.apply_remote(records, position)
        self.stats.applied += sum(not is_reserved(r.scope) for r in fx.records)
        self._perform(fx, {r.map for r in records})

    def _perform(self, fx: Effects, names: set[str]) -> None:
        """Effects of records another node accepted: out now, journaled (no one waits)."""
        rt = self.rt
        if names:
            self.repair.written(names)
        rt.deliver_all(fx.out)
        rt.publish_map_frames(fx.frames)
        rt.flush_soon()
        if not rt.commits.journaled or not fx.records:
            return
        try:  # nobody waits for this commit: the cluster's stream holds the records
            rt.commits.submit(Commit(0, fx.records))
        except OctosyncError as exc:
            if self._journal_ok:
                log.warning("cluster: remote map records not journaled (%s); positions stop", exc)
            self._journal_ok = False

    # --- anti-entropy ---------------------------------------------------------------------------

    async def _round(self) -> None:
        if self.repair.due():
            roots = self.repair.roots(self.rt.topgun.maps.store)
            if roots and self._nc is not None:
                await self._nc.publish(
                    self.subjects.roots, wire.encode(wire.MapRoots(self.node, roots))
                )

    async def _on_roots(self, msg: Msg) -> None:
        try:
            roots = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(roots, wire.MapRoots):
            return
        mine = self._compared(roots.roots)
        for walk in self.repair.heard(roots.node, mine, self.rt.topgun.maps.store):
            self.stats.walks += 1
            self._spawn(self._walk(walk))

    def _compared(self, roots: Mapping[str, int]) -> Mapping[str, int]:
        """A peer's roots this node compares with its own: every map (every node holds them)."""
        return roots

    async def _walk(self, walk: Walk) -> None:
        """Down the peer's Merkle tree where it differs, then its differing leaves' records."""
        store = self.rt.topgun.maps.store

        def step(data: bytes) -> bytes | None:
            answer_ = wire.decode(data)
            if isinstance(answer_, wire.LeavesReply):
                self.repair.know([walk.map])
                if answer_.records:
                    fx = self.rt.topgun.apply_remote(answer_.records)
                    self.stats.repaired += sum(not is_reserved(r.scope) for r in fx.records)
                    self._perform(fx, set())
                return None
            if not isinstance(answer_, wire.BucketsReply):
                return None
            request = walk.on_buckets(answer_, store.merkle(walk.map))
            return None if request is None else wire.encode(request)

        await self._pull(
            self.subjects.sync(walk.peer),
            lambda: wire.encode(walk.start()),
            step,
            f"{walk.map!r} from {walk.peer}",
            lambda: self.repair.finished(walk),
        )

    async def _on_sync(self, msg: Msg) -> None:
        try:
            request = wire.decode(msg.data)
        except OctosyncError as exc:
            await msg.respond(wire.encode(wire.Refused(exc.message)))
            return
        if not isinstance(request, wire.BucketsRequest | wire.LeavesRequest):
            return
        reply = answer(request, self.rt.topgun.maps.store, self.repair.timing.max_reply_bytes)
        await msg.respond(wire.encode(reply))
