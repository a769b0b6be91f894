"""TopGun maps held by interest (``[cluster] map_hold = "interest"``): the I/O side of
``cluster/map_interest.py``.

JetStream is the maps' store of record: each map has its own subject in the stream
``octosync_<cluster>_maps`` (``octosync.<cluster>.m.<token>``, as every node publishes it) and
a compacted snapshot in the key-value bucket ``octosync_<cluster>_map_snapshots`` (the records
carrying the map's state once a holder had taken its subject through the snapshot's stream
sequence). So a node follows only the subjects of the maps its clients use:

- **load**: the first message naming a map not held here waits (``MapGate``); the node reads
  the snapshot, folds it, then follows the map's subject from the sequence after it
  (``links/doc_consumers.py``: one push consumer per map, all delivering to one inbox) until
  it reached the subject's last sequence as it was when the load began, bounded by
  ``map_load_timeout``; then the messages that waited are handled, in order.
- **follow**: other nodes' batches of the map are folded as they come (``apply_remote``), and
  so are this node's own: a batch published before a release and reload is in no snapshot
  yet, and folding a record twice changes nothing.
- **publish**: as with every node holding every map (``links/cluster_maps.py``): each
  accepted batch to its map's subject, ``REPLICATED`` acks once JetStream stored it.
- **snapshot**: every ``snapshot_interval`` a holder whose copy took at least
  ``SNAPSHOT_TAIL`` messages since, with none of its own batches of it in flight, writes the
  snapshot (compare-and-set on the entry's revision), and once more when it lets the map go.
- **release**: ``map_idle`` seconds after its last member closed, and once nothing here follows
  it (a ``map:`` stream, a search index), the consumer stops and the map leaves memory.
- **anti-entropy** only between holders, over the maps loaded here.
- **seed**: a node whose journal has maps from when every node held every map publishes them
  to their subjects once (so they load past the stream's age limit), and the maps its journal
  brought back leave memory at start: none is held before a client names it.

Other nodes' records are not journaled here: JetStream is their record, and a node journals
only what its own clients wrote (its acks say so).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import KeyValueError
from nats.js.kv import KeyValue

from octosync.cluster.holding import HeldStats, Release
from octosync.cluster.map_interest import MapGate, Refuse, maps_named
from octosync.cluster.maps import Intake, cut
from octosync.crdt.op import OpRecord
from octosync.errors import OctosyncError
from octosync.links.cluster_link import stream_of, token
from octosync.links.cluster_maps import MapsHost, MapsLink
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
from octosync.topgun import Effects
from octosync.topgun.durable import is_reserved
from octosync.wire import cluster_maps as wire
from octosync.wire import topgun as tg

log = logging.getLogger("octosync.cluster.held_maps")

Resume = Callable[[tg.Message], None]


@dataclass(frozen=True, slots=True)
class Wanted:
    """What waits in the gate: the maps a message (or an HTTP sync request, a ``map:`` stream)
    uses that its connection may read or write, and the message to handle then."""

    names: tuple[str, ...]
    message: tg.Message | None = None


class _Map(Held):
    """What the link keeps of one map it loads or holds."""

    def __init__(self, name: str) -> None:
        super().__init__(name, token(name))
        self.intake = Intake("")  # never skips: see the module's docstring (follow)
        self.taken = 0
        """Messages of the subject taken since the snapshot known here."""
        self.changed = 0
        """Changes here (taken messages and local batches); compared with ``snap_changed``."""
        self.snap_changed = 0


class HeldMapsLink(MapsLink):
    """TopGun maps of one server across the cluster, each held only while used here."""

    def __init__(
        self,
        runtime: MapsHost,
        node: str,
        *,
        cluster: str,
        settings: LogSettings | None = None,
        hold: HoldSettings | None = None,
    ) -> None:
        super().__init__(runtime, node, cluster=cluster, settings=settings)
        self.holding = hold or HoldSettings()
        self.bucket = f"octosync_{cluster}_map_snapshots"
        self.holdings = holdings_for(self.holding)
        self.gate: MapGate[Wanted] = MapGate(self.holdings, lambda wanted: wanted.names)
        self.held_stats = HeldStats()
        self._maps: dict[str, _Map] = {}
        self._resume: dict[int, Callable[[Wanted], None]] = {}
        self._failing: dict[int, Callable[[OctosyncError], None]] = {}
        self._seed: tuple[Mapping[str, Sequence[OpRecord]], Callable[[], None]] | None = None
        self._streams: dict[str, int] = {}
        self._stream_ids = itertools.count(-1, -1)
        """Members standing for ``map:`` streams: negative, so never a connection's id."""
        self._inflight: Counter[str] = Counter()
        self._kv: KeyValue | None = None
        self._consumers: DocConsumers | None = None
        self._reconnects: Reconnects | None = None

    @property
    def position(self) -> int:
        """The highest map subject sequence taken here (each map has its own)."""
        return max((m.intake.position for m in self._maps.values()), default=0)

    def held(self) -> list[str]:
        return self.holdings.held()

    async def start(self, nc: NatsClient) -> None:
        """Make the stream and the snapshot bucket; follow nothing until a client names a map."""
        self._nc = nc
        js = self._js = nc.jetstream()
        self._kv, self._consumers = await open_held(
            nc, js, self.log_stream, self.log_subject, self.bucket, self.settings, self._on_map
        )
        await self._publish_seed()
        self._drop_unheld()
        await nc.subscribe(self.subjects.roots, cb=self._on_roots)
        await nc.subscribe(self.subjects.sync(self.node), cb=self._on_sync)
        self._reconnects = Reconnects(nc)
        self._spawn(self._ticker())

    def seed(self, maps: Mapping[str, Sequence[OpRecord]], done: Callable[[], None]) -> None:
        """Maps this node's journal holds from before they were held by interest (every node
        held every map): ``start`` publishes each to its subject once, so any node loads them
        even past the stream's age limit, then calls ``done``. Merges are idempotent, so every
        node publishing what it had gives their union."""
        self._seed = (maps, done)

    async def _publish_seed(self) -> None:
        if self._seed is None or self._js is None:
            return
        maps, done = self._seed
        self._seed = None
        stored = True
        for name, records in sorted(maps.items()):
            for batch in cut(records):
                stored &= await publish_stored(
                    self._js,
                    self.subjects.map(name),
                    wire.encode(wire.OpBatch(self.boot, batch)),
                    f"{self.boot}-seed-{next(self._ids)}",
                    self.settings.replicate_timeout,
                    self._retried,
                )
        if stored:
            log.info("cluster: %d maps of the journal published", len(maps))
            done()

    def _drop_unheld(self) -> None:
        """The maps the journal brought back leave memory: none is held before a client names
        it (then it is loaded from JetStream, which has them)."""
        topgun = self.rt.topgun
        for name in topgun.maps.store.maps():
            if not is_reserved(name) and not self.holdings.phase(name):
                topgun.drop_map(name)

    async def stop(self, grace: float = 2.0) -> None:
        await super().stop(grace)
        await stop_all(self._consumers, grace)

    # --- the sessions' holder (``server.ports.MapHolder``) -------------------------------------

    def take(self, conn: int, message: tg.Message, resume: Resume) -> bool:
        """A session's message: it waits for the maps it names that its connection may use (a
        name the core refuses loads nothing)."""

        def go(wanted: Wanted) -> None:
            if wanted.message is not None:
                resume(wanted.message)

        return self._take(conn, Wanted(self._usable(conn, maps_named(message)), message), go)

    def _usable(self, conn: int, names: Sequence[str]) -> tuple[str, ...]:
        topgun = self.rt.topgun
        return tuple(sorted({n for n in names if topgun.may_use(conn, n)}))

    def _take(self, conn: int, wanted: Wanted, resume: Callable[[Wanted], None]) -> bool:
        taken = self.gate.take(conn, wanted)
        for load in taken.loads:
            m = self._maps[load.name] = _Map(load.name)
            m.load = asyncio.get_running_loop().create_task(self._load(m))
        if not taken.now:
            self._resume[conn] = resume
        return taken.now

    async def hold(self, conn: int, names: Sequence[str]) -> None:
        wanted = Wanted(self._usable(conn, names))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def go(_wanted: Wanted) -> None:
            if not done.done():
                done.set_result(None)

        def fail(err: OctosyncError) -> None:
            if not done.done():
                done.set_exception(err)

        if self._take(conn, wanted, go):
            return
        self._failing[conn] = fail
        await done  # the load timeout ends it either way

    def follow(self, name: str, then: Callable[[], None]) -> bool:
        """A ``map:`` stream of the map starts: a member of it under an id of its own (never a
        connection's), for as long as the node streams it."""
        conn = self._streams.get(name)
        if conn is None:
            conn = self._streams[name] = next(self._stream_ids)
        names = () if is_reserved(name) else (name,)  # the stream refuses a reserved one
        return self._take(conn, Wanted(names), lambda _wanted: then())

    def closed(self, conn: int) -> None:
        self.gate.closed(conn)
        self._resume.pop(conn, None)
        self._failing.pop(conn, None)

    # --- loading --------------------------------------------------------------------------------

    async def _load(self, m: _Map) -> None:
        name = m.name
        try:
            await asyncio.wait_for(self._fetch(m), self.holding.load_timeout)
        except (TimeoutError, nats.errors.Error, OctosyncError, KeyValueError) as exc:
            log.warning("cluster: map %r not loaded: %s", name, exc)
            if self._maps.get(name) is m:
                self._released(*self.gate.failed(name))
            return
        if self._maps.get(name) is not m:
            return
        m.snap_at = time.monotonic()
        for go in self.gate.loaded(name):
            resume = self._resume.get(go.conn)
            if resume is None:
                continue
            try:
                resume(go.message)
            except OctosyncError as err:
                self.closed(go.conn)
                self._fault(go.conn, err)
        self.rt.flush_soon()

    async def _fetch(self, m: _Map) -> None:
        snapshot = await self._read_snapshot(m.name)
        if snapshot is not None:
            m.snap_revision, snap = snapshot
            m.intake.position = snap.position
            self._fold(m, snap.records)
        assert self._consumers is not None
        subject = self.subjects.map(m.name)
        await follow_to_end(self._consumers, m, subject, lambda: m.intake.position)
        m.snap_changed = m.changed if m.taken == 0 else -1

    async def _read_snapshot(self, name: str) -> tuple[int, wire.MapSnapshot] | None:
        assert self._kv is not None
        entry = await read_entry(self._kv, token(name))
        if entry is None:
            return None
        snapshot = wire.decode(entry[1])
        if not isinstance(snapshot, wire.MapSnapshot) or snapshot.map != name:
            raise OctosyncError(f"the snapshot of map {name!r} is not one", path="snapshot")
        return entry[0], snapshot

    def _fold(self, m: _Map, records: list[OpRecord]) -> None:
        fx = self.rt.topgun.apply_remote(records)
        self.stats.applied += sum(not is_reserved(r.scope) for r in fx.records)
        m.changed += 1
        self._perform(fx, {m.name})

    def _perform(self, fx: Effects, names: set[str]) -> None:
        """Out now, never journaled: JetStream is the record of other nodes' writes."""
        if names:
            self.repair.written(names)
        self.rt.deliver_all(fx.out)
        self.rt.publish_map_frames(fx.frames)
        self.rt.flush_soon()

    async def _on_map(self, key: str, seq: int, pending: int, msg: Msg) -> None:
        """A message of a map's subject, folded (one that is not a batch of it is passed
        over, so a load still reaches its target)."""
        try:
            m = self._maps.get(stream_of(key))
        except (ValueError, UnicodeDecodeError):
            return
        if m is None:
            return  # let go meanwhile
        try:
            batch = wire.decode(msg.data)
        except (OctosyncError, ValueError) as exc:
            self.stats.undecodable += 1
            log.warning("cluster: an undecodable map batch: %s", exc)
            batch = None
        if isinstance(batch, wire.OpBatch):
            self.stats.batches_in += 1
            records = [r for r in m.intake.take(seq, batch) if r.map == m.name]
            if records:
                self._fold(m, records)
        else:
            m.intake.admit(seq, m.intake.node)
        m.taken += 1
        if not m.caught_up.is_set() and not pending:
            m.caught_up.set()

    # --- publishing -----------------------------------------------------------------------------

    def _send_map(self, name: str, bodies: list[bytes], waiters: list[Any]) -> None:
        self._inflight[name] += 1
        m = self._maps.get(name)
        if m is not None:
            m.changed += 1
        super()._send_map(name, bodies, waiters)

    async def _publish(self, subject: str, data: bytes, msg_id: str, waiters: list[Any]) -> None:
        name = self.subjects.name_of(subject)
        try:
            await super()._publish(subject, data, msg_id, waiters)
        finally:
            self._inflight[name] -= 1
            if self._inflight[name] <= 0:
                del self._inflight[name]

    # --- rounds: releases, snapshots, anti-entropy ---------------------------------------------

    def _busy(self, name: str) -> bool:
        return self._inflight[name] > 0 or self.rt.topgun.watched(name)

    async def _round(self) -> None:
        self._released(*self.gate.due(busy=self._busy))
        now = time.monotonic()
        for name in self.holdings.held():
            m = self._maps.get(name)
            if m is None or m.snapping or self._inflight[name]:
                continue
            due = now - m.snap_at >= self.holding.snapshot_interval
            if due and m.taken >= SNAPSHOT_TAIL and m.changed != m.snap_changed:
                self._snapshot(m)
        if self._reconnects is not None and self._consumers is not None:
            await self._reconnects.follow_again(self._consumers)
            self.stats.resubscribed = self._consumers.recreated
        if self.repair.due():
            store = self.rt.topgun.maps.store
            self.repair.know(self.holdings.held())
            roots = {n: r for n, r in self.repair.roots(store).items() if self.holdings.ready(n)}
            if roots and self._nc is not None:
                await self._nc.publish(
                    self.subjects.roots, wire.encode(wire.MapRoots(self.node, roots))
                )

    def _released(self, releases: list[Release], refused: list[Refuse]) -> None:
        for refuse in refused:
            self._resume.pop(refuse.conn, None)
            fail = self._failing.pop(refuse.conn, None)
            if fail is not None:
                fail(refuse.error)
            self._fault(refuse.conn, refuse.error)
        for release in releases:
            self._let_go(release)

    def _let_go(self, release: Release) -> None:
        """Stop following the map, write its last snapshot if it changed, drop it."""
        m = self._maps.pop(release.name, None)
        if m is None:
            return
        if m.load is not None and not m.load.done():
            m.load.cancel()
        deleting = stop_following(self._consumers, m.key)
        if deleting is not None:
            self._spawn(deleting)
        if not release.failed and m.changed != m.snap_changed:
            self._snapshot(m)
        self.rt.topgun.drop_map(release.name)

    def _snapshot(self, m: _Map) -> None:
        m.snapping = True
        records = self.rt.topgun.maps.store.records_of(m.name)
        changed, position = m.changed, m.intake.position
        m.taken = 0
        self._spawn(self._write_snapshot(m, records, changed, position))

    async def _write_snapshot(
        self, m: _Map, records: list[OpRecord], changed: int, position: int
    ) -> None:
        """Compare-and-set on the revision known here (``held_subjects.write_snapshot``)."""
        assert self._kv is not None
        data = wire.encode(wire.MapSnapshot(m.name, position, records))

        async def theirs() -> tuple[int, int] | None:
            found = await self._read_snapshot(m.name)
            return None if found is None else (found[0], found[1].position)

        try:
            m.snap_revision, covered = await write_snapshot(
                self._kv, m.key, data, m.snap_revision, position, theirs, self.held_stats
            )
            if covered:
                m.snap_changed = changed
        except (nats.errors.Error, TimeoutError, OctosyncError, KeyValueError) as exc:
            log.info("cluster: snapshot of map %r not written: %s", m.name, exc)
        finally:
            m.snapping = False
            m.snap_at = time.monotonic()

    def _compared(self, roots: Mapping[str, int]) -> Mapping[str, int]:
        """A peer's roots, compared only for maps loaded here."""
        return {n: r for n, r in roots.items() if self.holdings.ready(n)}
