"""Shared documents held by interest (``[cluster] hold = "interest"``): the I/O side of
``cluster/holding.py``.

JetStream is the store of record: each document has its own subject in the stream
``octosync_<cluster>_documents`` (``octosync.<cluster>.planes.<token>``, the token a subject-safe
encoding of the name, ``cluster.holding.token``) and a compacted snapshot in the key-value
bucket ``octosync_<cluster>_document_snapshots`` (every entry a holder had once it had taken the
subject through the snapshot's stream sequence). So a node follows only the subjects of the
documents its clients use:

- **load**: the snapshot, then a consumer of the document's subject from the sequence after the
  snapshot's (``links/doc_consumers.py``: one per document, all delivering to one
  subscription), until it reached the subject's last sequence as it was when the load began
  (bounded by ``load_timeout``); the plane then serves the members that waited.
- **follow**: other nodes' batches of the document merge as they come; this node's own batches
  are published to the document's subject and merged once JetStream stored them, as with every
  document held (``links/cluster_planes.py``: an acknowledgement means stored in JetStream).
- **snapshot**: every ``snapshot_interval`` a holder whose copy changed by at least
  ``SNAPSHOT_TAIL`` messages, with none of its own batches of it still in flight, writes the
  snapshot (compare-and-set on the entry's revision:
  a newer one written by another holder is left alone); and once more when it lets it go.
- **release**: ``idle`` seconds after its last member left, the consumer stops and the
  document leaves memory.
- **anti-entropy** only between holders: roots go out for documents loaded here, and a peer's
  roots are compared only for documents loaded here.

A snapshot larger than NATS's payload bound is not written (``snapshots_too_large``): loading
that document costs its subject's history, which the stream keeps ``map_log_max_age``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import KeyValueError
from nats.js.kv import KeyValue

from octosync.cluster.holding import (
    HeldStats,
    Release,
    name_of,
    token,
)
from octosync.cluster.planes import Intake, pack
from octosync.errors import OctosyncError
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp
from octosync.links.cluster_planes import PlanesHost, PlanesLink
from octosync.links.doc_consumers import DocConsumers
from octosync.links.held_subjects import (
    SNAPSHOT_TAIL,
    Held,
    HoldSettings,
    Reconnects,
    follow_to_end,
    holdings_for,
    open_held,
    read_entry,
    stop_all,
    stop_following,
    write_snapshot,
)
from octosync.links.jetstream_log import LogSettings, publish_stored
from octosync.wire import cluster_planes as wire

log = logging.getLogger("octosync.cluster.held")


class HeldHost(PlanesHost, Protocol):
    """What the link uses of the plane besides ``PlanesHost``: serve the members that waited
    for a load, and let a document go."""

    def loaded(self, stream: str) -> None: ...

    def release(self, stream: str, failed: bool) -> None: ...


class _Doc(Held):
    """What the link keeps of one document it loads or holds."""

    def __init__(self, name: str, boot: str) -> None:
        super().__init__(name, token(name))
        self.intake = Intake(boot)
        self.since_snapshot = 0
        """Messages of the subject since the snapshot known here: the tail a load reads."""
        self.snap_version = -1
        """The replica's version the snapshot here covers (-1: none written here)."""


class HeldPlanesLink(PlanesLink):
    """Shared documents of one server across the cluster, each held only while used here."""

    def __init__(
        self,
        host: HeldHost,
        node: str,
        *,
        cluster: str,
        settings: LogSettings | None = None,
        hold: HoldSettings | None = None,
    ) -> None:
        super().__init__(host, node, cluster=cluster, settings=settings)
        self.held_host = host
        self.hold = hold or HoldSettings()
        self.log_stream = f"octosync_{cluster}_documents"
        self.doc_prefix = f"octosync.{cluster}.planes."
        self.log_subject = self.doc_prefix + ">"
        self.bucket = f"octosync_{cluster}_document_snapshots"
        self.holdings = holdings_for(self.hold)
        self.held_stats = HeldStats()
        self._docs: dict[str, _Doc] = {}
        self._inflight: Counter[str] = Counter()
        self._kv: KeyValue | None = None
        self._consumers: DocConsumers | None = None
        self._reconnects: Reconnects | None = None
        self._seed: tuple[Mapping[str, Sequence[CrdtOp]], Callable[[], None]] | None = None

    @property
    def position(self) -> int:
        """The highest document subject sequence taken here (each document has its own)."""
        return max((d.intake.position for d in self._docs.values()), default=0)

    def subject(self, stream: str) -> str:
        return self.doc_prefix + token(stream)

    async def start(self, nc: NatsClient) -> None:
        """Make the stream and the snapshot bucket; follow nothing until a member joins."""
        self._nc = nc
        js = self._js = nc.jetstream()
        self._kv, self._consumers = await open_held(
            nc, js, self.log_stream, self.log_subject, self.bucket, self.settings, self._on_doc
        )
        await self._publish_seed()
        await nc.subscribe(self.roots_subject, cb=self._on_roots)
        await nc.subscribe(self._sync + self.node, cb=self._on_sync)
        self._reconnects = Reconnects(nc)
        self._spawn(self._ticker())

    def seed(self, documents: Mapping[str, Sequence[CrdtOp]], done: Callable[[], None]) -> None:
        """Documents this node's journal holds from before they were held by interest (every
        node kept every document, its journal their record): ``start`` publishes each to its
        subject once, so any node loads them, then calls ``done``. Merges are idempotent, so
        every node publishing what it had gives their union."""
        self._seed = (documents, done)

    async def _publish_seed(self) -> None:
        if self._seed is None or self._js is None:
            return
        documents, done = self._seed
        self._seed = None
        stored = True
        for name, ops in sorted(documents.items()):
            for batch in pack(list(ops)):
                data = wire.encode(wire.PlaneBatch(self.boot, name, batch))
                stored &= await publish_stored(
                    self._js,
                    self.subject(name),
                    data,
                    f"{self.boot}-seed-{next(self._ids)}",
                    self.settings.replicate_timeout,
                    self._retried,
                )
        if stored:
            log.info("cluster: %d documents of the journal published", len(documents))
            done()

    async def stop(self, grace: float = 2.0) -> None:
        await super().stop(grace)
        await stop_all(self._consumers, grace)

    # --- the plane's holder ---------------------------------------------------------------------

    def joined(self, conn: ConnId, stream: str) -> bool:
        load = self.holdings.joined(conn, stream)
        if load is not None:
            doc = self._docs[stream] = _Doc(stream, self.boot)
            doc.load = asyncio.get_running_loop().create_task(self._load(doc))
        return self.holdings.ready(stream)

    def left(self, conn: ConnId, stream: str) -> None:
        self.holdings.left(conn, stream)

    def ready(self, stream: str) -> bool:
        return self.holdings.ready(stream)

    def held(self) -> list[str]:
        return self.holdings.held()

    # --- loading --------------------------------------------------------------------------------

    async def _load(self, doc: _Doc) -> None:
        """The snapshot, then the subject until its last sequence at the start."""
        name = doc.name
        try:
            await asyncio.wait_for(self._fetch(doc), self.hold.load_timeout)
        except (TimeoutError, nats.errors.Error, OctosyncError, KeyValueError) as exc:
            log.warning("cluster: document %r not loaded: %s", name, exc)
            if self._docs.get(name) is doc:
                release = self.holdings.failed(name)
                if release is not None:
                    self._let_go(release)
            return
        if self._docs.get(name) is doc and self.holdings.loaded(name):
            doc.snap_at = time.monotonic()
            self.held_host.loaded(name)

    async def _fetch(self, doc: _Doc) -> None:
        assert self._js is not None
        assert self._kv is not None
        subject = self.subject(doc.name)
        snap = await self._read_snapshot(doc.name)
        if snap is not None:
            revision, snapshot = snap
            doc.snap_revision = revision
            doc.intake.position = snapshot.position
            self._merge(doc.name, snapshot.ops, None)
        assert self._consumers is not None
        doc.since_snapshot = await follow_to_end(  # bounded by the caller's load timeout
            self._consumers, doc, subject, lambda: doc.intake.position
        )
        if snap is not None and doc.intake.position == snap[1].position:
            replica = self.host.replicas().get(doc.name)
            doc.snap_version = -1 if replica is None else replica.version  # nothing to compact

    async def _read_snapshot(self, name: str) -> tuple[int, wire.DocSnapshot] | None:
        assert self._kv is not None
        entry = await read_entry(self._kv, token(name))
        if entry is None:
            return None
        snapshot = wire.decode(entry[1])
        if not isinstance(snapshot, wire.DocSnapshot) or snapshot.stream != name:
            raise OctosyncError(f"the snapshot of {name!r} is not one", path="snapshot")
        return entry[0], snapshot

    async def _on_doc(self, key: str, seq: int, pending: int, msg: Msg) -> None:
        """A message of a document's subject: merged unless this process published it (one
        that is not a batch of it is passed over, so a load still reaches its target)."""
        try:
            doc = self._docs.get(name_of(key))
        except OctosyncError:
            return
        if doc is None:
            return  # let go meanwhile
        try:
            batch = wire.decode(msg.data)
        except (OctosyncError, ValueError) as exc:
            self.stats.undecodable += 1
            log.warning("cluster: an undecodable document batch: %s", exc)
            batch = None
        if isinstance(batch, wire.PlaneBatch) and batch.stream == doc.name:
            self.stats.batches_in += 1
            ops = doc.intake.take(seq, batch)
            if ops:
                self.repair.written([doc.name])
                self.stats.merged += self._merge(doc.name, ops, None)
        else:
            doc.intake.admit(seq, doc.intake.node)
        if doc.caught_up.is_set():
            doc.since_snapshot += 1
        elif not pending:
            doc.caught_up.set()

    # --- publishing -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """As ``PlanesLink._flush``, each document's batches on its own subject."""
        self._flush_due = False
        queued, self._queue = self._queue, {}
        for stream, q in queued.items():
            batches = pack(q.ops)
            for w in q.waiters:
                w.pending = len(batches)
            subject = self.subject(stream)
            for ops in batches:
                self._inflight[stream] += 1
                data = wire.encode(wire.PlaneBatch(self.boot, stream, ops))
                self._send(subject, data, q.waiters)

    async def _publish(self, subject: str, data: bytes, msg_id: str, waiters: list[Any]) -> None:
        stream = name_of(subject[len(self.doc_prefix) :])
        try:
            await super()._publish(subject, data, msg_id, waiters)
        finally:
            self._inflight[stream] -= 1
            if self._inflight[stream] <= 0:
                del self._inflight[stream]

    # --- rounds: releases, snapshots, anti-entropy ---------------------------------------------

    async def _round(self) -> None:
        for release in self.holdings.due(busy=lambda name: self._inflight[name] > 0):
            self._let_go(release)
        now = time.monotonic()
        replicas = self.host.replicas()
        for name in self.holdings.held():
            doc = self._docs.get(name)
            replica = replicas.get(name)
            if doc is None or not replica or doc.snapping or self._inflight[name]:
                continue
            due = now - doc.snap_at >= self.hold.snapshot_interval
            if due and doc.since_snapshot >= SNAPSHOT_TAIL and replica.version != doc.snap_version:
                self._snapshot(doc, replica.ops(), replica.version)
        if self._reconnects is not None and self._consumers is not None:
            await self._reconnects.follow_again(self._consumers)
            self.stats.resubscribed = self._consumers.recreated
        if self.repair.due():
            ready = {n: r for n, r in replicas.items() if self.holdings.ready(n)}
            roots = self.repair.roots(ready)
            if roots and self._nc is not None:
                await self._nc.publish(
                    self.roots_subject, wire.encode(wire.PlaneRoots(self.node, roots))
                )

    def _let_go(self, release: Release) -> None:
        """Stop following the document, write its last snapshot if it changed, drop it."""
        doc = self._docs.pop(release.name, None)
        if doc is not None:
            if doc.load is not None and not doc.load.done():
                doc.load.cancel()
            deleting = stop_following(self._consumers, doc.key)
            if deleting is not None:
                self._spawn(deleting)
            replica = self.host.replicas().get(release.name)
            if not release.failed and replica is not None and replica.version != doc.snap_version:
                self._snapshot(doc, replica.ops(), replica.version)
        self.held_host.release(release.name, release.failed)

    def _snapshot(self, doc: _Doc, ops: Sequence[CrdtOp], version: int) -> None:
        doc.snapping = True
        doc.since_snapshot = 0
        position = doc.intake.position
        self._spawn(self._write_snapshot(doc, ops, version, position))

    async def _write_snapshot(
        self, doc: _Doc, ops: Sequence[CrdtOp], version: int, position: int
    ) -> None:
        """Compare-and-set on the revision this node knows (``held_subjects.write_snapshot``)."""
        assert self._kv is not None
        data = wire.encode(wire.DocSnapshot(doc.name, position, list(ops)))

        async def theirs() -> tuple[int, int] | None:
            found = await self._read_snapshot(doc.name)
            return None if found is None else (found[0], found[1].position)

        try:
            doc.snap_revision, covered = await write_snapshot(
                self._kv,
                token(doc.name),
                data,
                doc.snap_revision,
                position,
                theirs,
                self.held_stats,
            )
            if covered:
                doc.snap_version = version
        except (nats.errors.Error, TimeoutError, OctosyncError, KeyValueError) as exc:
            log.info("cluster: snapshot of %r not written: %s", doc.name, exc)
        finally:
            doc.snapping = False
            doc.snap_at = time.monotonic()

    async def _on_roots(self, msg: Msg) -> None:
        """A peer's roots, compared only for documents loaded here."""
        try:
            roots = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(roots, wire.PlaneRoots):
            return
        mine = {n: r for n, r in roots.roots.items() if self.holdings.ready(n)}
        for walk in self.repair.heard(roots.node, mine, self.host.replicas()):
            self.stats.walks += 1
            self._spawn(self._walk(walk))
