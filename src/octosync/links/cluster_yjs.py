"""``/yjs`` documents across the cluster's nodes, over NATS: the I/O side of ``cluster/yjs.py``.

It publishes each update the face journaled to the JetStream stream ``octosync_<cluster>_yjs``
(subject ``octosync.<cluster>.y``), once, and calls the face back when JetStream stored it (the
face then applies, fans out and confirms); it follows the stream from the position this node
journaled last, applying other nodes' updates through ``YjsFace.merge_remote`` (fanned out to
this node's connections, journaled); and it runs anti-entropy: vectors broadcast on
``octosync.<cluster>.yv``, diffs and answering vectors to ``octosync.<cluster>.yd.<node>``.

The stream, its publishing with retries and the catch-up before the port opens are
``OpLogLink``'s, as for TopGun maps and shared documents. Publishing is pipelined, one message
per document per event-loop turn (every update of that turn, cut at a size bound).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from pycrdt import Doc

from octosync.cluster.rounds import Position
from octosync.cluster.yjs import (
    Parts,
    YjsClusterStats,
    YjsRepair,
    YjsRepairTiming,
    pack,
    split,
)
from octosync.errors import OctosyncError
from octosync.links.jetstream_log import LogSettings, OpLogLink, Waiter
from octosync.wire import cluster_yjs as wire

log = logging.getLogger("octosync.cluster.yjs")


class YjsClusterHost(Protocol):
    """What the link uses of the server (``server.yjs_face.YjsFace``)."""

    def docs(self) -> Mapping[str, Doc[Any]]: ...

    def merge_remote(
        self, document: str, updates: Sequence[bytes], position: int | None
    ) -> int: ...

    @property
    def replica_position(self) -> int: ...

    def fault(self, conn: int, err: OctosyncError) -> None: ...


@dataclass(slots=True)
class _Queued:
    updates: list[bytes] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)


class YjsLink(OpLogLink):
    """Replicates one server's ``/yjs`` documents through the cluster's NATS connection."""

    def __init__(
        self,
        host: YjsClusterHost,
        node: str,
        *,
        cluster: str,
        settings: LogSettings | None = None,
    ) -> None:
        prefix = f"octosync.{cluster}"
        super().__init__(node, settings or LogSettings(), f"octosync_{cluster}_yjs", prefix + ".y")
        self.host = host
        self.vectors_subject = f"{prefix}.yv"
        self._direct = f"{prefix}.yd."
        self.intake = Position(self.boot, host.replica_position)
        self.repair = YjsRepair(
            node,
            time.monotonic,
            YjsRepairTiming(interval=self.settings.sync_interval, settle=self.settings.settle),
        )
        self.stats: YjsClusterStats = YjsClusterStats()
        self._queue: dict[str, _Queued] = {}
        self._flush_due = False
        self._parts = Parts()

    @property
    def position(self) -> int:
        return self.intake.position

    async def start(self, nc: NatsClient) -> None:
        """Replay the op stream from this node's journaled position, then follow it and run
        the rounds."""
        self.intake.position = max(self.intake.position, self.host.replica_position)
        await self._open(
            nc,
            {self.vectors_subject: self._on_vectors, self._direct + self.node: self._on_direct},
        )

    # --- publishing (the face's side) -----------------------------------------------------------

    def replicate(self, conn: int, document: str, update: bytes, then: Callable[[], None]) -> None:
        """Publish ``update`` (journaled here) and call ``then`` once JetStream stored it; an
        update not stored in time resets ``conn``."""
        self.repair.written([document])
        queued = self._queue.get(document)
        if queued is None:
            queued = self._queue[document] = _Queued()
        queued.updates.append(update)
        queued.waiters.append(Waiter(conn, then))
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        queued, self._queue = self._queue, {}
        for document, q in queued.items():
            batches = pack(q.updates)
            for w in q.waiters:
                w.pending = len(batches)
            for updates in batches:
                data = wire.encode(wire.YjsBatch(self.boot, document, updates))
                self._send(self.log_subject, data, q.waiters)

    def _fault(self, conn: int, err: OctosyncError) -> None:
        self.host.fault(conn, err)

    # --- the op stream (other nodes' updates) ---------------------------------------------------

    async def _on_batch(self, msg: Msg) -> None:
        try:
            seq = int(msg.metadata.sequence.stream)
            batch = wire.decode(msg.data)
        except (OctosyncError, ValueError) as exc:
            self.stats.undecodable += 1
            log.warning("cluster: an undecodable Yjs batch: %s", exc)
            return
        if not isinstance(batch, wire.YjsBatch):
            return
        self.stats.batches_in += 1
        if not self.intake.admit(seq, batch.node):
            return
        self.repair.written([batch.document])
        self.stats.applied += self.host.merge_remote(
            batch.document, batch.updates, self.intake.position
        )

    # --- anti-entropy ---------------------------------------------------------------------------

    async def _round(self) -> None:
        if self.repair.due() and self._nc is not None:
            vectors = self.repair.vectors(self.host.docs())
            if vectors:
                message = wire.YjsVectors(self.node, vectors)
                await self._nc.publish(self.vectors_subject, wire.encode(message))

    async def _on_vectors(self, msg: Msg) -> None:
        try:
            message = wire.decode(msg.data)
        except OctosyncError:
            self.stats.undecodable += 1
            return
        if isinstance(message, wire.YjsVectors):
            await self._answer(message, answer_only=False)

    async def _on_direct(self, msg: Msg) -> None:
        try:
            message = wire.decode(msg.data)
        except OctosyncError:
            self.stats.undecodable += 1
            return
        if isinstance(message, wire.YjsDiff):
            update = self._parts.take(
                message.node, message.document, message.part, message.parts, message.update
            )
            if update is not None:
                self.stats.repaired += self.host.merge_remote(message.document, [update], None)
        elif isinstance(message, wire.YjsVectors):
            await self._answer(message, answer_only=True)

    async def _answer(self, vectors: wire.YjsVectors, *, answer_only: bool) -> None:
        """Push what the peer lacks; ask it (this node's vectors) for what it has more of."""
        nc = self._nc
        if nc is None:
            return
        heard = self.repair.heard(
            vectors.node, vectors.vectors, self.host.docs(), answer_only=answer_only
        )
        self.stats.too_large += heard.too_large
        to = self._direct + vectors.node
        for push in heard.pushes:
            parts = split(push.update)
            for i, data in enumerate(parts):
                diff = wire.YjsDiff(self.node, push.document, data, part=i, parts=len(parts))
                await nc.publish(to, wire.encode(diff))
            self.stats.pushed += 1
        if heard.asks:
            self.stats.walks += 1
            await nc.publish(to, wire.encode(wire.YjsVectors(self.node, heard.asks)))
