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
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import BucketNotFoundError, KeyValueError, NotFoundError
from nats.js.kv import KeyValue

from octosync.cluster.holding import (
    HeldStats,
    Holdings,
    HoldTiming,
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
from octosync.links.jetstream_log import LogSettings, ensure_stream, publish_stored
from octosync.wire import cluster_planes as wire

log = logging.getLogger("octosync.cluster.held")

MAX_CONSUMERS = 1 << 20
"""The documents stream's consumer limit: one consumer per document held, per node (the
server's default, 1,000 from nats-server 2.15, would cap what a whole cluster holds)."""
MAX_SNAPSHOT_BYTES = 900 * 1024
SNAPSHOT_TAIL = 64
"""Messages of a document's subject since its snapshot before a holder writes a new one (and
once more when it lets the document go): a load reads at most about this many after it."""
"""Below NATS's default 1 MB payload bound, with room for the key-value envelope."""


class HeldHost(PlanesHost, Protocol):
    """What the link uses of the plane besides ``PlanesHost``: serve the members that waited
    for a load, and let a document go."""

    def loaded(self, stream: str) -> None: ...

    def release(self, stream: str, failed: bool) -> None: ...


@dataclass(frozen=True, slots=True)
class HoldSettings:
    """``[cluster]`` settings of documents held by interest."""

    idle: float = 30.0
    """Seconds a document with no member stays held."""
    load_timeout: float = 10.0
    """Seconds a load may take."""
    snapshot_interval: float = 10.0
    """Seconds at least between two snapshots of a document by this node."""


class _Doc:
    """What the link keeps of one document it loads or holds."""

    def __init__(self, name: str, boot: str) -> None:
        self.name = name
        self.intake = Intake(boot)
        self.key = token(name)
        self.caught_up = asyncio.Event()
        """Set once the consumer delivered every message the subject had (the load's end)."""
        self.since_snapshot = 0
        """Messages of the subject since the snapshot known here: the tail a load reads."""
        self.load: asyncio.Task[Any] | None = None
        self.snap_revision = 0
        """The key-value revision of the snapshot last read or written here (0: none)."""
        self.snap_version = -1
        """The replica's version the snapshot here covers (-1: none written here)."""
        self.snap_at = time.monotonic()
        self.snapping = False


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
        self.holdings = Holdings(
            time.monotonic, HoldTiming(idle=self.hold.idle, load_timeout=self.hold.load_timeout)
        )
        self.held_stats = HeldStats()
        self._docs: dict[str, _Doc] = {}
        self._inflight: Counter[str] = Counter()
        self._kv: KeyValue | None = None
        self._consumers: DocConsumers | None = None
        self._reconnects = 0
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
        await ensure_stream(
            js,
            self.log_stream,
            self.log_subject,
            self.settings.replicas,
            self.settings.max_age,
            max_consumers=MAX_CONSUMERS,
        )
        try:
            self._kv = await js.key_value(self.bucket)
        except BucketNotFoundError:
            self._kv = await js.create_key_value(
                bucket=self.bucket, history=1, replicas=self.settings.replicas
            )
        self._consumers = DocConsumers(nc, js, self.log_stream, self._on_doc)
        await self._consumers.start()
        await self._publish_seed()
        await nc.subscribe(self.roots_subject, cb=self._on_roots)
        await nc.subscribe(self._sync + self.node, cb=self._on_sync)
        self._reconnects = int(nc.stats.get("reconnects", 0))
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
        if self._consumers is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._consumers.stop_all(), grace)

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
        pending = await self._consumers.follow(doc.key, subject, lambda: doc.intake.position)
        doc.since_snapshot = pending
        if not pending:
            doc.caught_up.set()
        await doc.caught_up.wait()  # bounded by the caller's load timeout
        if snap is not None and doc.intake.position == snap[1].position:
            replica = self.host.replicas().get(doc.name)
            doc.snap_version = -1 if replica is None else replica.version  # nothing to compact

    async def _read_snapshot(self, name: str) -> tuple[int, wire.DocSnapshot] | None:
        assert self._kv is not None
        try:
            entry = await self._kv.get(token(name))
        except (NotFoundError, KeyValueError):
            return None
        if not entry.value:
            return None
        snapshot = wire.decode(entry.value)
        if not isinstance(snapshot, wire.DocSnapshot) or snapshot.stream != name:
            raise OctosyncError(f"the snapshot of {name!r} is not one", path="snapshot")
        return int(entry.revision or 0), snapshot

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
        await self._refollow()
        if self._consumers is not None:
            self.stats.resubscribed = self._consumers.recreated
        if self.repair.due():
            ready = {n: r for n, r in replicas.items() if self.holdings.ready(n)}
            roots = self.repair.roots(ready)
            if roots and self._nc is not None:
                await self._nc.publish(
                    self.roots_subject, wire.encode(wire.PlaneRoots(self.node, roots))
                )

    async def _refollow(self) -> None:
        """After NATS came back, follow each document again from where it got (the server
        drops a consumer nobody listened to for ``INACTIVE`` seconds)."""
        if self._nc is None:
            return
        reconnects = int(self._nc.stats.get("reconnects", 0))
        if reconnects == self._reconnects:
            return
        self._reconnects = reconnects
        if self._consumers is not None:
            await self._consumers.follow_again()

    def _let_go(self, release: Release) -> None:
        """Stop following the document, write its last snapshot if it changed, drop it."""
        doc = self._docs.pop(release.name, None)
        if doc is not None:
            if doc.load is not None and not doc.load.done():
                doc.load.cancel()
            name = None if self._consumers is None else self._consumers.let_go(doc.key)
            if name is not None and self._consumers is not None:
                self._spawn(self._consumers.delete(name))
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
        """Compare-and-set on the revision this node knows; when another holder wrote since,
        its snapshot is read, and replaced only if it covers less of the subject."""
        assert self._kv is not None
        key = token(doc.name)
        data = wire.encode(wire.DocSnapshot(doc.name, position, list(ops)))
        try:
            if len(data) > MAX_SNAPSHOT_BYTES:
                self.held_stats.snapshots_too_large += 1
                doc.snap_version = version
                return
            for _ in range(3):
                try:
                    if doc.snap_revision:
                        doc.snap_revision = await self._kv.update(key, data, last=doc.snap_revision)
                    else:
                        doc.snap_revision = await self._kv.create(key, data)
                    doc.snap_version = version
                    self.held_stats.snapshots += 1
                    return
                except KeyValueError:
                    theirs = await self._read_snapshot(doc.name)
                    if theirs is None:
                        doc.snap_revision = 0
                        continue
                    doc.snap_revision = theirs[0]
                    if theirs[1].position >= position:
                        self.held_stats.snapshot_conflicts += 1
                        doc.snap_version = version
                        return
        except (nats.errors.Error, TimeoutError, OctosyncError) as exc:
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
