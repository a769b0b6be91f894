"""The TopGun face's rules for every connection at once (sans-I/O).

Events in (``connect``, ``handle(conn, message)``, ``disconnect``, ``tick``), typed effects
out (``topgun.effects``): each :class:`Outbound` is one message for one or many connections,
which the server encodes once (``server.topgun_wire``). What a write concern waits for is
explicit in :class:`Effects`: ``out`` goes now, ``records`` must be journaled, and
``durable`` goes only once those records (and every record queued before them) are
committed. Each message type has its handler (``topgun.handlers``); a write batch's rules
are ``topgun.write_batch``, a map's anti-entropy ``topgun.map_sync``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import msgspec

from octosync.crdt.hlc import HLC
from octosync.crdt.op import MAX_MAP_NAME, OpKind, OpRecord
from octosync.crdt.sync_messages import NIL, WireTimestamp
from octosync.errors import CrdtValueError, Forbidden, OctosyncError
from octosync.ipc.messages import Snapshot
from octosync.store.records import KIND_OP, EncodedRecord, encode_record
from octosync.topgun import durable, replies, requests
from octosync.topgun.access import Conn
from octosync.topgun.arrivals import Arrivals
from octosync.topgun.counters import CounterTable
from octosync.topgun.effects import Effects, EventRun, EventRuns, Grants, Outbound
from octosync.topgun.embedding import Embedder
from octosync.topgun.event_journal import JournalSource, JournalSubscriptions
from octosync.topgun.handlers import HANDLERS
from octosync.topgun.hybrid import LiveHybrid
from octosync.topgun.hybrid_query import LiveHybridQueries
from octosync.topgun.index_feed import IndexBatch, IndexFeed
from octosync.topgun.indexer import Indexed, Indexer
from octosync.topgun.locks import Grant, LockTable
from octosync.topgun.map_streams import MapStreams, to_json
from octosync.topgun.maps import Maps
from octosync.topgun.op_events import record_events
from octosync.topgun.partitions import PartitionTable
from octosync.topgun.queries import QueryTable
from octosync.topgun.query_pages import QueryPages
from octosync.topgun.search import COMMIT_GAP_MS, FullText
from octosync.topgun.vectors import VectorIndexes
from octosync.topgun.write_batch import covered_last_id
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv
from octosync.wire.topgun_services import GcPrune, GcPrunePayload

__all__ = ["Effects", "Grants", "Outbound", "TopGunCore", "covered_last_id", "record_events"]

SERVER_NODE = "octosync"
QUERY_BUDGET = 2_000
"""Rows live queries look at per write or flush at most (a few milliseconds): the rest waits
for the next flush."""
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder()


class TopGunCore:
    def __init__(
        self,
        clock: Callable[[], int],
        *,
        persistent: bool,
        node_id: str = SERVER_NODE,
        gc_age_ms: int | None = None,
        gc_every_ms: int = 3_600_000,
        search_maps: Collection[str] = (),
        vector_maps: Collection[str] = (),
        embedder: Embedder | None = None,
        sql: bool = False,
        index_inline: bool = True,
        commit_gap_ms: int = COMMIT_GAP_MS,
    ) -> None:
        """``clock``: wall-clock milliseconds; ``persistent``: a journal commits the records
        (without one, ``PERSISTED`` cannot be achieved and the ack says so, and lock grants
        and counters are not journaled); ``gc_age_ms``: tombstones older than this are pruned
        by :meth:`tick` every ``gc_every_ms`` (None: never); ``search_maps``, ``vector_maps``:
        maps with a full-text (``topgun.search``) or vector index (``topgun.vectors``, text
        embedded by ``embedder``, a deterministic hashing one by default); ``sql``: answer
        ``SQL_QUERY`` (``topgun.sql``); ``index_inline``: the indexes take in writes at each
        flush and before each search, on the caller's thread (a bare core); without it the
        server runs :attr:`indexer` on a thread of its own (:meth:`take_index_batch`,
        :meth:`indexed`); either way they commit at most every ``commit_gap_ms``."""
        self.clock = clock
        self.persistent = persistent
        self.gc_age_ms = gc_age_ms
        self.gc_every_ms = gc_every_ms
        self._next_gc = clock() + gc_every_ms
        self.hlc = HLC(node_id, clock)
        self.maps = Maps(self.hlc)
        self.locks = LockTable()
        self.counters = CounterTable()
        self.queries = QueryTable()
        self.query_budget = QUERY_BUDGET
        self.pages = QueryPages()
        self.search = FullText(search_maps)
        self.vectors = VectorIndexes(vector_maps, embedder)
        self.hybrid = LiveHybrid()
        self.hybrid_queries = LiveHybridQueries()
        self.index_feed = IndexFeed()
        """Written keys the indexes have still to take in, and the index watermark."""
        self.indexer = Indexer(self.search, self.vectors)
        self.index_inline = index_inline
        self.commit_gap_ms = commit_gap_ms
        self._index_at = -commit_gap_ms
        """When the indexes last committed (inline) or the indexer last took a batch."""
        self.sql = sql
        self.arrivals = Arrivals(clock())
        self.journal: JournalSource | None = None
        """Set by a server with a journal: where ``JOURNAL_READ`` reads (off the loop)."""
        self.partitions = PartitionTable()
        self.nodes: Callable[[], Iterable[tuple[str, str]]] | None = None
        """Set by a server: the nodes a TopGun client may connect to now, ``(node id, its
        /topgun WebSocket URL)``, this one included (``PARTITION_MAP``); None: not served."""
        self.journal_subs = JournalSubscriptions()
        """Where HTTP sync clients resume, per map they follow (``topgun.arrivals``)."""
        self.map_streams = MapStreams()
        self._pending: list[tuple[int, frozenset[str], list[tg.ServerEventPayload]]] = []
        """Applied events waiting for :meth:`flush`: (writer, maps touched, events)."""
        self.gc_horizon_ms = 0
        self.replicated = False
        """Set by a server in a cluster: map ops go to ``Effects.replicate``."""
        self.acks_replicated = False
        """Set by a server in a cluster (``[cluster] map_acks = "replicated"``): a batch
        that asks ``MEMORY`` or ``APPLIED`` (TopGun's client always does) is acknowledged as
        ``REPLICATED``, once the cluster stored it, so a node killed after its ack loses no
        write the client was told about."""
        self.replica_position = 0
        """The cluster op stream's sequence applied and journaled through (restored by
        :meth:`load` from the reserved record :meth:`apply_remote` journals)."""
        self._conns: dict[int, Conn] = {}
        self.topics: dict[str, set[int]] = {}

    # -- connections ----------------------------------------------------------------------

    def connect(self, conn: int, grants: Grants) -> None:
        self._conns[conn] = Conn(grants)

    def connected(self, conn: int) -> bool:
        return conn in self._conns

    def disconnect(self, conn: int) -> Effects:
        """Forget a connection: its subscriptions, and its locks (the next waiter gets one)."""
        fx = Effects()
        c = self._conns.pop(conn, None)
        if c is None:
            return fx
        for topic in c.topics:
            subs = self.topics.get(topic)
            if subs is not None:
                subs.discard(conn)
                if not subs:
                    del self.topics[topic]
        self.counters.disconnect(conn)
        self.queries.disconnect(conn)
        self.pages.disconnect(conn)
        self.search.disconnect(conn)
        self.hybrid.disconnect(conn)
        self.hybrid_queries.disconnect(conn)
        self.journal_subs.disconnect(conn)
        self.granted(fx, self.locks.disconnect(conn, self.clock()))
        return fx

    def tick(self) -> Effects:
        """Time passed (the server calls this about once a second): lock TTLs, and the
        tombstone GC when it is due."""
        fx = Effects()
        now = self.clock()
        self.granted(fx, self.locks.expire(now))
        fx.offload.extend(self.journal_subs.tails(self.journal, now))
        self._push_partitions(fx, now)
        if self.gc_age_ms is not None and now >= self._next_gc:
            self._next_gc = now + self.gc_every_ms
            pruned = self.gc(now - self.gc_age_ms)
            fx.out.extend(pruned.out)
        return fx

    def _push_partitions(self, fx: Effects, now: int) -> None:
        """A new partition map (a node joined or was lost) to every connection, as TopGun's
        server broadcasts it: TopGun's cluster client asks only its first seed for a new map
        and sends the ops it cannot route to that seed, so when the seed is the node lost,
        this map is how the client drops it and goes on with the survivors. Clients that
        are not cluster clients leave the message unhandled. The first view of the nodes is
        not pushed (nobody holds an older one)."""
        if self.nodes is None:
            return
        before = self.partitions.version
        self.partitions.observe(self.nodes(), now)
        if self.partitions.version == before or before == 0:
            return
        targets = tuple(self._conns)
        if targets:
            message = sv.PartitionMap(self.partitions.payload(now, self.hlc.node_id))
            fx.out.append(Outbound(targets, message))

    def topic_subscribers(self, topic: str) -> set[int]:
        return set(self.topics.get(topic, ()))

    def load(self, records: Iterable[OpRecord]) -> int:
        """Rebuild from journaled records (start-up): the maps, and from the reserved records
        (``topgun.durable``) the fencing-token high-water mark and the counters. Returns how
        many map records changed state."""
        reserved: list[OpRecord] = []

        def maps_only() -> Iterable[OpRecord]:
            for rec in records:
                if durable.is_reserved(rec.map):
                    reserved.append(rec)
                else:
                    yield rec

        changed = self.maps.load(maps_only())
        if reserved:
            self.hlc.update(max(rec.ts for rec in reserved))
            state = durable.restore(reserved)
            self.replica_position = state.replica_position
            self.locks.resume_after(state.fencing_token)
            for name, sides in state.counters.items():
                self.counters.restore(name, sides.positive, sides.negative)
        for index in (self.search, self.vectors):
            names = [n for n in self.maps.store.maps() if index.enabled(n)]
            index.rebuild((n, self.maps.live_items(n)) for n in names)
        return changed

    def follow_map(self, name: str) -> Snapshot | None:
        """A lazily client asked for ``map:<name>``: the snapshot that starts the stream (None
        when it runs already); from now on every applied batch adds a delta to
        ``Effects.frames``."""
        if durable.is_reserved(name):
            raise Forbidden(
                f"map names starting with {durable.RESERVED_PREFIX!r} are the server's own",
                path="session_id",
            )
        if self.map_streams.followed(name):
            return None
        store = self.maps.store
        keys = dict.fromkeys(row.key for row in store.rows(name))
        values = ((k, v) for k in keys if (v := self._stream_value(name, k)) is not None)
        return self.map_streams.follow(name, values)

    def value_of(self, name: str, key: str) -> bytes | None:
        """A key's live LWW value (MsgPack bytes), None when absent or removed."""
        win = self.maps.store.lww_winner(name, key)
        return win.value if win is not None and win.op is OpKind.PUT else None

    def _stream_value(self, name: str, key: str) -> bytes | None:
        """A key's live value as the ``map:`` stream shows it (JSON), None when absent."""
        store = self.maps.store
        win = store.lww_winner(name, key)
        if win is not None:
            return to_json(_DEC.decode(win.value)) if win.op is OpKind.PUT else None
        live = store.or_values(name, key)
        return to_json([_DEC.decode(v) for _, v in live]) if live else None

    def _map_deltas(self, fx: Effects, events: list[tg.ServerEventPayload]) -> None:
        by_map: dict[str, dict[str, bytes | None]] = {}
        for e in events:
            if self.map_streams.followed(e.map_name):
                by_map.setdefault(e.map_name, {})[e.key] = None
        for name, keys in by_map.items():
            values = {k: self._stream_value(name, k) for k in keys}
            delta = self.map_streams.changed(name, values)
            if delta is not None:
                fx.frames.append((name, delta))

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, conn: int, message: tg.Message) -> Effects:
        """One message from an authenticated connection; raises a typed error to refuse it
        (nothing changed), or answers a refused request in its own response type
        (``topgun.replies``)."""
        try:
            fx = Effects()
            handler = HANDLERS.get(type(message))
            if handler is None:
                requests.serve(fx, conn, message)
            else:
                handler(self, fx, conn, self._conns[conn], message)
            return fx
        except OctosyncError as err:
            answers = replies.refusals(message, err)
            if not answers:
                raise
            fx = Effects()
            for reply in answers:
                fx.send(conn, reply)
            return fx

    def fan_out(self, fx: Effects, sender: int, events: list[tg.ServerEventPayload]) -> None:
        """Live queries on the touched maps (the sender's too) get their changes now, and the
        ``map:`` streams their delta; the events wait for :meth:`flush`."""
        if not events:
            return
        self._query_updates(fx, events)
        if self.map_streams.any_followed():
            self._map_deltas(fx, events)
        maps = {e.map_name for e in events} if len(events) > 1 else {events[0].map_name}
        self._pending.append((sender, frozenset(maps), events))
        if self.arrivals.maps:
            for name in maps & self.arrivals.maps.keys():
                self.arrivals.written(name, (e.key for e in events if e.map_name == name))
        if self.search.active or self.vectors.active:
            self._feed_indexes(maps, events)

    def _feed_indexes(self, maps: Collection[str], events: list[tg.ServerEventPayload]) -> None:
        """Written keys of indexed maps, with their values now, into the index feed."""
        feed, fulltext, vectors = self.index_feed, self.search, self.vectors
        for name in maps:
            text, vec = fulltext.enabled(name), vectors.enabled(name)
            if not (text or vec):
                continue
            if text:
                fulltext.ensure(name)
            if vec:
                vectors.ensure(name)
            keys = list(dict.fromkeys(e.key for e in events if e.map_name == name))
            for key in keys:
                feed.put(name, key, self.value_of(name, key))
            self.hybrid.written(name, keys)  # its exact method reads the map as it is now

    def has_pending_events(self) -> bool:
        """Something for :meth:`flush`: events to send, queries or indexes still to update."""
        return (
            bool(self._pending)
            or self.queries.pending()
            or (self.index_inline and (len(self.index_feed) > 0 or self.indexer.uncommitted))
        )

    def flush(self) -> Effects:
        """The events applied since the last flush, for every connection with their map open
        (by now) but the one that wrote them: each batch's events encoded once (one encode
        call), then one message per distinct (maps open, writer left out) group, the same
        bytes for every connection in it. The server flushes once per event-loop turn, so
        the writes of many batches and clients reach a subscriber as one message and one
        socket write."""
        fx = Effects()
        self._query_changes(fx)
        if self.journal_subs.any():
            fx.offload.extend(self.journal_subs.tails(self.journal, self.clock()))
        self.index_inline_step(fx)
        self._hybrid_changes(fx)
        chunks, self._pending = self._pending, []
        if not chunks:
            return fx
        touched = frozenset().union(*(maps for _, maps, _ in chunks))
        senders = {sender for sender, _, _ in chunks}
        groups: dict[tuple[frozenset[str], int | None], list[int]] = {}
        for target, tc in self._conns.items():
            seen = touched & tc.maps
            if seen:
                key = (seen, target if target in senders else None)
                groups.setdefault(key, []).append(target)
        if not groups:
            return fx
        runs = [EventRun(events) for _, _, events in chunks]
        for (seen, left_out), targets in groups.items():
            parts: list[EventRun] = []
            for (sender, maps, events), run in zip(chunks, runs, strict=True):
                if sender == left_out:
                    continue
                if maps <= seen:
                    parts.append(run)
                else:  # a batch over several maps, not all open here: the rare path
                    some = [e for e in events if e.map_name in seen]
                    parts.append(EventRun(some))
            if any(run.events for run in parts):
                fx.out.append(Outbound(tuple(targets), EventRuns(parts)))
        return fx

    # -- indexes ----------------------------------------------------------------------------

    def index_inline_step(self, fx: Effects) -> None:
        """A bare core's indexing step (flushes, and before each search): the written keys
        into the indexes, committed when ``commit_gap_ms`` passed since the last commit."""
        if not self.index_inline:
            return
        batch = self.index_feed.take()
        now = self.clock()
        commit = now - self._index_at >= self.commit_gap_ms
        if batch is None and not (commit and self.indexer.uncommitted):
            return
        done = self.indexer.run(batch, commit)
        if commit:
            self._index_at = now
        self._indexed(fx, done)

    def index_due_in(self) -> int | None:
        """Milliseconds until the indexer thread may take the next batch (0: now); None when
        nothing waits or a batch is being indexed (never for an inline core)."""
        feed = self.index_feed
        if self.index_inline or feed.in_flight or len(feed) == 0:
            return None
        return max(0, self._index_at + self.commit_gap_ms - self.clock())

    def take_index_batch(self) -> IndexBatch | None:
        """The next batch for the indexer thread (to run as ``indexer.run(batch, True)``),
        None unless :meth:`index_due_in` is 0."""
        if self.index_due_in() != 0:
            return None
        self._index_at = self.clock()
        return self.index_feed.take()

    def indexed(self, done: Indexed) -> Effects:
        """The indexer thread's step is over (on the loop): its commit is published, the
        watermark moves, and live searches on the maps it changed get their updates."""
        fx = Effects()
        self._indexed(fx, done)
        return fx

    def index_failed(self, batch: IndexBatch) -> None:
        """The indexer thread could not index ``batch``: its keys wait to be taken again."""
        self.index_feed.failed(batch)

    def _indexed(self, fx: Effects, done: Indexed) -> None:
        if done.batch is not None:
            self.index_feed.done(done.batch)
        if not done.committed:
            return
        self.search.publish(done.searchers)
        self.index_feed.published()
        changed = done.changed

        def values(name: str, key: str) -> bytes | None:
            """The value a key was indexed under (what its score was computed from)."""
            rows = changed.get(name)
            if rows is not None and key in rows:
                return rows[key]
            return self.value_of(name, key)

        for target, update in self.search.live_changes(changed, values):
            fx.send(target, update)
        for name, keys in changed.items():
            self.hybrid.written(name, keys)
            self.hybrid_queries.written(name, keys)
        self._hybrid_changes(fx)

    def _hybrid_changes(self, fx: Effects) -> None:
        """Live hybrid searches and queries on maps written (or indexes committed) since,
        run again."""
        if self.hybrid.any():
            found = self.hybrid.flush(
                self.search, self.vectors, self.value_of, self.maps.live_items
            )
            for target, change in found:
                fx.send(target, change)
        if self.hybrid_queries.any():
            deltas = self.hybrid_queries.flush(self.search, self.value_of, self.maps.live_items)
            for target, delta in deltas:
                fx.send(target, delta)

    def _query_updates(self, fx: Effects, events: list[tg.ServerEventPayload]) -> None:
        """Live queries look at what was written now, within ``QUERY_BUDGET`` rows; what is
        left goes out with the next flushes (``has_pending_events``), so one write that
        touches many queries never holds the loop for long."""
        by_map: dict[str, list[str]] = {}
        watched = self.queries.watched()
        for e in events:
            if e.record is not None and e.map_name in watched:
                by_map.setdefault(e.map_name, []).append(e.key)
        for name, keys in by_map.items():
            self.queries.mark(name, keys)
        self._query_changes(fx)

    def _query_changes(self, fx: Effects) -> None:
        if self.queries.pending():
            changes = self.queries.run(self.query_budget, self.value_of, self.maps.live_items)
            for conn, query_id, key, value, kind in changes:
                raw = (
                    NIL if value is None else msgspec.Raw(self.pages.project(conn, query_id, value))
                )
                update = tg.QueryUpdatePayload(query_id, key, raw, kind)
                fx.send(conn, tg.QueryUpdate(update))

    def apply_remote(self, records: Sequence[OpRecord], position: int | None = None) -> Effects:
        """Op records another node of the cluster accepted (its grants were checked there):
        merged like local ones, with the HLC moved past theirs; what changed is journaled here
        and reaches this node's map subscribers (none left out), live queries and ``map:``
        streams. ``position``: the cluster op stream's sequence these records reach, journaled
        after them, so a restart replays from there. Records that cannot be folded (a value
        that is not what its op needs) and reserved maps are skipped."""
        fx = Effects()
        mine = [rec for rec in records if not durable.is_reserved(rec.map)]
        if mine:
            self.hlc.update(max(rec.ts for rec in mine))
        changed: list[OpRecord] = []
        for rec in mine:
            try:
                if self.maps.apply(rec, clock_merged=True):
                    changed.append(rec)
            except CrdtValueError:
                continue
        if changed:
            # Records from another node come out of a strict decode (``wire.cluster_maps``):
            # valid as they are, encoded for the journal without a second check.
            fx.records.extend(EncodedRecord(KIND_OP, rec.map, _ENC.encode(rec)) for rec in changed)
            seen = {rec.map for rec in changed}
            seen = {name for name in seen if self._watched(name)}
            if seen:
                events = [e for rec in changed if rec.map in seen for e in record_events(rec)]
                self.fan_out(fx, 0, events)
        if position is not None and position > self.replica_position:
            self.replica_position = position
            if self.persistent:
                fx.records.append(encode_record(durable.position_record(position, self.hlc.now())))
        return fx

    def drop_map(self, name: str) -> bool:
        """Forget map ``name`` (held by interest, the node lets it go): not while someone
        here follows it (a live query, a ``map:`` stream, an index, a connection with it
        open); True when it went."""
        if self._watched(name):
            return False
        self.maps.drop(name)
        return True

    def may_use(self, conn: int, name: str) -> bool:
        """``conn`` may read or write map ``name`` (a name the core would not refuse out of
        hand): only such a name makes a node holding maps by interest load it."""
        c = self._conns.get(conn)
        if c is None or not 0 < len(name) <= MAX_MAP_NAME or durable.is_reserved(name):
            return False
        return c.grants.may_map(name, "read") or c.grants.may_map(name, "write")

    def watched(self, name: str) -> bool:
        """Someone here follows map ``name`` (see :meth:`drop_map`)."""
        return self._watched(name)

    def _watched(self, name: str) -> bool:
        """Someone here follows map ``name`` (a connection with it open, a live query, its
        ``map:`` stream): only then are its events built."""
        return (
            self.map_streams.followed(name)
            or self.search.enabled(name)
            or self.vectors.enabled(name)
            or name in self.arrivals.maps
            or name in self.queries.watched()
            or any(name in c.maps for c in self._conns.values())
        )

    def gc(self, horizon_ms: int) -> Effects:
        """Forget tombstones older than ``horizon_ms`` and tell every client (``GC_PRUNE``);
        a client whose last sync is older gets ``SYNC_RESET_REQUIRED`` from then on."""
        fx = Effects()
        self.maps.store.gc(horizon_ms)
        self.gc_horizon_ms = max(self.gc_horizon_ms, horizon_ms)
        if self._conns:
            stamp = WireTimestamp(horizon_ms, 0, self.hlc.node_id)
            prune = GcPrune(GcPrunePayload(stamp))
            fx.out.append(Outbound(tuple(self._conns), prune))
        return fx

    # -- helpers --------------------------------------------------------------------------

    def granted(self, fx: Effects, grants: list[Grant]) -> None:
        """Grants go out once the highest token among them is journaled (with a journal), so
        a restart can never grant a token a client already holds."""
        if not grants:
            return
        out = fx.durable if self.persistent else fx.out
        for g in grants:
            payload = tg.LockGrantedPayload(g.request_id, g.fencing_token, g.name)
            out.append(Outbound((g.conn,), tg.LockGranted(payload)))
        if self.persistent:
            top = max(g.fencing_token for g in grants)
            fx.records.append(encode_record(durable.fence_record(top, self.hlc.now())))

    def error(self, err: OctosyncError) -> tg.Error:
        """The ``ERROR`` message for a refused frame."""
        details: dict[str, Any] = {"name": err.name}
        if err.path is not None:
            details["path"] = err.path
        payload = tg.ErrorPayload(err.code, err.message, msgspec.Raw(_ENC.encode(details)))
        return tg.Error(payload)
