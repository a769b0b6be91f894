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
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

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
from octosync.errors import InternalError, OctosyncError
from octosync.ipc.messages import Delta, Snapshot
from octosync.links.cluster_link import Faultable, token
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import EncodedRecord
from octosync.topgun import Effects, Outbound, TopGunCore
from octosync.topgun.durable import is_reserved
from octosync.wire import cluster_maps as wire

log = logging.getLogger("octosync.cluster.maps")

ATTEMPT_TIMEOUT = 2.0
"""Seconds one publish waits for JetStream's ack before it is sent again."""
REQUEST_TIMEOUT = 2.0
"""Seconds a repair request waits for the peer's answer."""


@dataclass(frozen=True, slots=True)
class MapSettings:
    """``[cluster]`` settings for TopGun maps (``server.config``)."""

    replicas: int = 1
    """JetStream replicas of the op stream (1 for a single NATS server)."""
    sync_interval: float = 30.0
    """Seconds between anti-entropy rounds."""
    settle: float = 2.0
    """A map written within this many seconds is left out of a round."""
    replicate_timeout: float = 30.0
    """Seconds a batch may take to be stored in JetStream before its writers are reset."""
    catch_up_timeout: float = 30.0
    """Seconds a starting node waits to replay the op stream before it opens its port."""


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

    def sync(self, node: str) -> str:
        return self._sync + node


@dataclass(slots=True)
class _Waiter:
    """A session's batch: ``then`` once every message holding its records is stored."""

    conn: int
    then: Callable[[], None] | None
    pending: int = 0
    failed: bool = False


@dataclass(slots=True)
class _Queued:
    name: str
    bodies: list[bytes]
    waiter: _Waiter


class MapsHost(Protocol):
    """What the maps link uses of the server (``server.runtime.Runtime``): the TopGun core,
    the journal, the connections to reset, and the TopGun face's ways out."""

    @property
    def topgun(self) -> TopGunCore: ...

    @property
    def writer(self) -> GroupCommitWriter | None: ...

    @property
    def links(self) -> Mapping[int, Faultable]: ...

    def deliver_all(self, out: Sequence[Outbound]) -> None: ...

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None: ...

    def flush_topgun_soon(self) -> None: ...

    def after_commit(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None]
    ) -> None: ...


class MapsLink:
    """Replicates one server's TopGun maps through the cluster's NATS connection."""

    def __init__(
        self,
        runtime: MapsHost,
        node: str,
        *,
        cluster: str,
        settings: MapSettings | None = None,
    ) -> None:
        self.rt = runtime
        self.node = node
        self.settings = settings or MapSettings()
        self.subjects = MapSubjects(cluster)
        self._boot = f"{node}-{os.getpid()}-{time.time_ns():x}"
        """This process's name on its batches: it skips its own, never those of an earlier
        run of this node (their records may have missed its journal)."""
        self.intake = Intake(self._boot, runtime.topgun.replica_position)
        self.repair = Repair(
            node,
            time.monotonic,
            RepairTiming(interval=self.settings.sync_interval, settle=self.settings.settle),
        )
        self.stats = MapStats()
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._sub: Any = None
        self._queue: list[_Queued] = []
        self._flush_due = False
        self._incoming: list[OpRecord] = []
        self._apply_due = False
        self._journal_ok = True
        """False after a journal submit failed: positions stop being journaled, so a restart
        replays from before the records that were not stored."""
        self._last_in = time.monotonic()
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def position(self) -> int:
        return self.intake.position

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, nc: NatsClient) -> None:
        """Make sure the op stream exists, replay it from this node's journaled position
        (bounded by ``catch_up_timeout``), then follow it and serve repairs."""
        self._nc = nc
        js = self._js = nc.jetstream()
        try:
            info = await js.stream_info(self.subjects.stream)
        except NotFoundError:
            info = await js.add_stream(
                name=self.subjects.stream,
                subjects=[self.subjects.ops],
                num_replicas=self.settings.replicas,
                storage=api.StorageType.FILE,
            )
        if (info.config.num_replicas or 1) != self.settings.replicas:
            log.warning(
                "cluster: the op stream %s has %s replicas, not the %s configured here",
                self.subjects.stream,
                info.config.num_replicas,
                self.settings.replicas,
            )
        self.intake.position = max(self.intake.position, self.rt.topgun.replica_position)
        self.repair.know(self.rt.topgun.maps.store.maps())
        await nc.subscribe(self.subjects.roots, cb=self._on_roots)
        await nc.subscribe(self.subjects.sync(self.node), cb=self._on_sync)
        # The last sequence there is to replay (none when the stream holds no message: a
        # purge keeps the sequence numbers, and anti-entropy repairs what went with it).
        last = int(info.state.last_seq or 0) if info.state.messages else 0
        await self._follow()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.catch_up_timeout
        while self.intake.position < last and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.intake.position < last:
            log.warning(
                "cluster: caught up with the op stream only to %d of %d before serving",
                self.intake.position,
                last,
            )
        self._apply_incoming()
        self._spawn(self._ticker())

    async def stop(self, grace: float = 2.0) -> None:
        """Give publishes in flight ``grace`` seconds to be stored, then stop everything."""
        publishing = [t for t in self._tasks if t.get_name() == "publish"]
        if publishing:
            await asyncio.wait(publishing, timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        waiter = _Waiter(conn, then)
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
            waiters: dict[int, _Waiter] = {}
            size = 0
            for q in items:
                for body in q.bodies:
                    if bodies and size + len(body) > DEFAULT_MAX_BATCH_BYTES:
                        self._send(name, bodies, list(waiters.values()))
                        bodies, waiters, size = [], {}, 0
                    if id(q.waiter) not in waiters:
                        q.waiter.pending += 1
                        waiters[id(q.waiter)] = q.waiter
                    bodies.append(body)
                    size += len(body)
            if bodies:
                self._send(name, bodies, list(waiters.values()))

    def _send(self, name: str, bodies: list[bytes], waiters: list[_Waiter]) -> None:
        data = wire.encode_batch(self._boot, bodies)
        msg_id = f"{self._boot}-{next(self._ids)}"
        self._spawn(self._publish(self.subjects.map(name), data, msg_id, waiters), "publish")

    async def _publish(
        self, subject: str, data: bytes, msg_id: str, waiters: list[_Waiter]
    ) -> None:
        assert self._js is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.replicate_timeout
        headers = {"Nats-Msg-Id": msg_id}
        while True:
            try:
                future = await self._js.publish_async(
                    subject, data, headers=dict(headers), wait_stall=ATTEMPT_TIMEOUT
                )
                await asyncio.wait_for(future, ATTEMPT_TIMEOUT)
                break
            except (nats.errors.Error, TimeoutError) as exc:
                if loop.time() >= deadline:
                    self.stats.failed += 1
                    log.warning("cluster: a map batch on %s was not stored: %s", subject, exc)
                    for w in waiters:
                        self._fail(w)
                    return
                self.stats.republished += 1
                await asyncio.sleep(0.1)
        self.stats.published += 1
        for w in waiters:
            w.pending -= 1
            if w.pending == 0 and not w.failed and w.then is not None:
                w.then()

    def _fail(self, w: _Waiter) -> None:
        if w.failed:
            return
        w.failed = True
        link = self.rt.links.get(w.conn)
        if link is not None:
            link.fault(InternalError("the cluster did not store a write in time; send it again"))

    # --- the op stream (other nodes' batches) ---------------------------------------------------

    async def _follow(self) -> None:
        """Subscribe to the op stream from the position after the last one taken."""
        assert self._js is not None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.intake.position + 1,
        )
        self._sub = await self._js.subscribe(
            self.subjects.ops,
            stream=self.subjects.stream,
            cb=self._on_batch,
            ordered_consumer=True,
            idle_heartbeat=1.0,
            config=config,
        )
        self._last_in = time.monotonic()

    async def _on_batch(self, msg: Msg) -> None:
        self._last_in = time.monotonic()
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
        rt.flush_topgun_soon()
        if rt.writer is None or not fx.records:
            return
        try:
            rt.after_commit(0, fx.records, _nothing)
        except OctosyncError as exc:
            if self._journal_ok:
                log.warning("cluster: remote map records not journaled (%s); positions stop", exc)
            self._journal_ok = False

    # --- anti-entropy ---------------------------------------------------------------------------

    async def _ticker(self) -> None:
        step = min(0.5, self.settings.sync_interval)
        while True:
            await asyncio.sleep(step)
            try:
                await self._watchdog()
                if self.repair.due():
                    roots = self.repair.roots(self.rt.topgun.maps.store)
                    if roots and self._nc is not None:
                        await self._nc.publish(
                            self.subjects.roots, wire.encode(wire.MapRoots(self.node, roots))
                        )
            except Exception:  # one bad round must not stop the next
                log.exception("cluster: a map round failed")

    async def _watchdog(self) -> None:
        """The ordered consumer recreates itself when NATS comes back; should it stay silent
        while the stream moved past this node, follow it again from the position."""
        if self._js is None or time.monotonic() - self._last_in < 5.0:
            return
        try:
            info = await self._js.stream_info(self.subjects.stream)
        except Exception:
            return
        if int(info.state.last_seq or 0) > self.intake.position:
            self.stats.resubscribed += 1
            await self._follow()
        else:
            self._last_in = time.monotonic()

    async def _on_roots(self, msg: Msg) -> None:
        try:
            roots = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(roots, wire.MapRoots):
            return
        for walk in self.repair.heard(roots.node, roots.roots, self.rt.topgun.maps.store):
            self.stats.walks += 1
            self._spawn(self._walk(walk))

    async def _walk(self, walk: Walk) -> None:
        assert self._nc is not None
        store = self.rt.topgun.maps.store
        try:
            request: wire.BucketsRequest | wire.LeavesRequest | None = walk.start()
            while request is not None:
                reply = await self._nc.request(
                    self.subjects.sync(walk.peer), wire.encode(request), timeout=REQUEST_TIMEOUT
                )
                answer_ = wire.decode(reply.data)
                if isinstance(answer_, wire.LeavesReply):
                    self.repair.know([walk.map])
                    if answer_.records:
                        fx = self.rt.topgun.apply_remote(answer_.records)
                        self.stats.repaired += sum(not is_reserved(r.scope) for r in fx.records)
                        self._perform(fx, set())
                    return
                if not isinstance(answer_, wire.BucketsReply):
                    return
                request = walk.on_buckets(answer_, store.merkle(walk.map))
        except (OctosyncError, nats.errors.Error, TimeoutError) as exc:
            log.info("cluster: repair of %r from %s stopped: %s", walk.map, walk.peer, exc)
        finally:
            self.repair.finished(walk)

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


def _nothing() -> None:
    """Nobody waits for the commit of records other nodes accepted."""
