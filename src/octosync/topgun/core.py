"""The TopGun face's rules for every connection at once (sans-I/O).

Events in (``connect``, ``handle(conn, message)``, ``disconnect``, ``tick``), bytes out: each
:class:`Outbound` is one MsgPack message, encoded once, for one or many connections. What a
write concern waits for is explicit in :class:`Effects`: ``out`` goes now, ``records`` must be
journaled, and ``durable`` goes only once those records (and every record queued before them)
are committed.

Write concerns (TopGun's ``WriteConcern``, lowest to highest): ``FIRE_AND_FORGET`` is
acknowledged on receipt (the ack is the first thing sent, before the ops are applied);
``MEMORY`` (the default) once the op is validated and in memory, ``APPLIED`` once merged into
the map; both are immediate here because validation and the merge happen in the same step.
``PERSISTED`` waits for the journal's group commit. ``REPLICATED`` is a cluster's: with
``replicated`` set (``serve --cluster``) every op that changed a map goes to ``replicate`` (the
cluster's op stream, ``cluster.maps``), and a ``REPLICATED`` batch puts every valid op there,
changed or not (a client resending what this node has already must not get an ack for what the
cluster never stored), with its ack in ``replicated``: sent once the cluster stored them. A
``PERSISTED`` ack in a cluster waits for both. Alone, ``REPLICATED`` is achieved as
``APPLIED`` with ``success: false``, as is ``PERSISTED`` on a server without a journal: the
ack says what was achieved, never more. One ``OP_ACK`` per batch, at the batch's
strongest requested level; ``results`` (per op) are sent when a level was asked for
explicitly. Ops the token may not write (or whose value is invalid) get ``OP_REJECTED`` and
are not applied; the ack neither lists them nor covers them by ``lastId``, so the real client
keeps them pending (TopGun's server acks no refused op either), and the accepted ops of the
batch are acknowledged through ``results``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import msgspec

from octosync.crdt.hlc import HLC
from octosync.crdt.op import MAX_MAP_NAME, OpKind, OpRecord
from octosync.crdt.sync import SyncResponder
from octosync.crdt.sync_messages import (
    NIL,
    MerkleReqBucket,
    SyncInit,
    SyncMessage,
    SyncResetPayload,
    SyncResetRequired,
    WireLWWRecord,
    WireTimestamp,
)
from octosync.errors import (
    CrdtValueError,
    DecodeError,
    Forbidden,
    InvalidRecord,
    LimitExceeded,
    OctosyncError,
)
from octosync.ipc.messages import Delta, Snapshot
from octosync.store.records import KIND_OP, EncodedRecord, encode_op_records, encode_record
from octosync.topgun import durable, event_journal, replies, requests, sql
from octosync.topgun.arrivals import Arrivals
from octosync.topgun.counters import CounterTable
from octosync.topgun.embedding import Embedder
from octosync.topgun.event_journal import JournalSource, JournalSubscriptions
from octosync.topgun.hybrid import LiveHybrid, hybrid_search, vector_search
from octosync.topgun.hybrid_query import LiveHybridQueries
from octosync.topgun.index_feed import IndexBatch, IndexFeed
from octosync.topgun.indexer import Indexed, Indexer
from octosync.topgun.locks import Grant, LockTable
from octosync.topgun.map_streams import MapStreams, to_json
from octosync.topgun.maps import Maps
from octosync.topgun.offload import OffLoop
from octosync.topgun.partitions import PartitionTable
from octosync.topgun.queries import Query, QueryTable, parse_spec
from octosync.topgun.query_pages import QueryPages
from octosync.topgun.search import COMMIT_GAP_MS, FullText
from octosync.topgun.vectors import VectorIndexes
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv
from octosync.wire.topgun_requests import QuerySyncInit
from octosync.wire.topgun_services import GcPrune, GcPrunePayload, OrMapSyncInit

LEVELS = ("FIRE_AND_FORGET", "MEMORY", "APPLIED", "REPLICATED", "PERSISTED")
RANK = {level: i for i, level in enumerate(LEVELS)}
DEFAULT_LEVEL = "MEMORY"
TOPIC_NAME = re.compile(r"^[A-Za-z0-9_\-.:/]{1,256}$")
_LEADING_INT = re.compile(r"\s*[+-]?\d+")
SERVER_NODE = "octosync"
QUERY_BUDGET = 2_000
"""Rows live queries look at per write or flush at most (a few milliseconds): the rest waits
for the next flush."""
FORBIDDEN_CODE = 403

_MAX_COUNTER_NAME = 4096
"""The journal's key bound (``crdt.op.Key``): a counter's state is journaled under its name."""

_MAX_TALLY = 2**53
"""JavaScript's safe integers: what the client can count to, and what MsgPack encodes."""

_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder()
_PUT = OpKind.PUT
_NIL = bytes(NIL)


class Grants(Protocol):
    """What the core asks of a connection's identity (``server.auth.ClaimGrants``)."""

    @property
    def subject(self) -> str: ...

    def may_map(self, name: str, action: str) -> bool: ...

    def may_topic(self, name: str, action: str) -> bool: ...

    def may_lock(self, name: str) -> bool: ...

    def may_counter(self, name: str, action: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Outbound:
    """One encoded message and the connections it goes to."""

    targets: tuple[int, ...]
    data: bytes


@dataclass(slots=True)
class Effects:
    out: list[Outbound] = field(default_factory=list)
    records: list[EncodedRecord] = field(default_factory=list)
    durable: list[Outbound] = field(default_factory=list)
    """Sent once ``records`` and everything journaled before them are committed."""
    frames: list[tuple[str, Snapshot | Delta]] = field(default_factory=list)
    """For the lazily stream of each named map (``map:<name>``), in order."""
    replicate: list[EncodedRecord] = field(default_factory=list)
    """Op records for the cluster's op stream (only with ``TopGunCore.replicated``)."""
    replicated: list[Outbound] = field(default_factory=list)
    """Sent once ``replicate`` is stored by the cluster (``REPLICATED`` acks); ``durable``
    waits for that too when ``replicate`` is not empty."""
    offload: list[OffLoop] = field(default_factory=list)
    """Work for a worker thread (SQL), whose answer the server sends when it is done."""

    def send(self, conn: int, message: tg.Message) -> None:
        self.out.append(Outbound((conn,), tg.encode(message)))


@dataclass(slots=True)
class _Conn:
    grants: Grants
    maps: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)


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
        self._conns: dict[int, _Conn] = {}
        self._topics: dict[str, set[int]] = {}

    # -- connections ----------------------------------------------------------------------

    def connect(self, conn: int, grants: Grants) -> None:
        self._conns[conn] = _Conn(grants)

    def connected(self, conn: int) -> bool:
        return conn in self._conns

    def disconnect(self, conn: int) -> Effects:
        """Forget a connection: its subscriptions, and its locks (the next waiter gets one)."""
        fx = Effects()
        c = self._conns.pop(conn, None)
        if c is None:
            return fx
        for topic in c.topics:
            subs = self._topics.get(topic)
            if subs is not None:
                subs.discard(conn)
                if not subs:
                    del self._topics[topic]
        self.counters.disconnect(conn)
        self.queries.disconnect(conn)
        self.pages.disconnect(conn)
        self.search.disconnect(conn)
        self.hybrid.disconnect(conn)
        self.hybrid_queries.disconnect(conn)
        self.journal_subs.disconnect(conn)
        self._granted(fx, self.locks.disconnect(conn, self.clock()))
        return fx

    def tick(self) -> Effects:
        """Time passed (the server calls this about once a second): lock TTLs, and the
        tombstone GC when it is due."""
        fx = Effects()
        now = self.clock()
        self._granted(fx, self.locks.expire(now))
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
            fx.out.append(Outbound(targets, tg.encode(message)))

    def topic_subscribers(self, topic: str) -> set[int]:
        return set(self._topics.get(topic, ()))

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

    def _value_of(self, name: str, key: str) -> bytes | None:
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
            return self._dispatch(conn, message)
        except OctosyncError as err:
            answers = replies.refusals(message, err)
            if not answers:
                raise
            fx = Effects()
            for reply in answers:
                fx.send(conn, reply)
            return fx

    def _dispatch(self, conn: int, message: tg.Message) -> Effects:
        c = self._conns[conn]
        fx = Effects()
        match message:
            case tg.OpBatch(payload=payload):
                self._write(fx, conn, c, payload.ops, payload.write_concern)
            case tg.ClientOpMessage(payload=op):
                self._write(fx, conn, c, [op], None)
            case SyncInit() | MerkleReqBucket():
                self._sync(fx, conn, c, message)
            case OrMapSyncInit() | tg.ORMapMerkleReqBucket() | tg.ORMapDiffRequest():
                self._or_sync(fx, conn, c, message)
            case tg.ORMapPushDiff(payload=p):
                self._or_push(fx, conn, c, p)
            case tg.Ping(timestamp=ts):
                fx.send(conn, tg.Pong(timestamp=ts, server_time=self.clock()))
            case tg.QuerySub(payload=p):
                self._require_map(c, p.map_name, "read")
                raw = bytes(p.query)
                query = Query(conn, p.query_id, p.map_name, parse_spec(raw))
                items = partial(self.maps.live_items, p.map_name)
                fx.send(conn, self.pages.subscribe(self.queries, query, raw, p.fields, items))
            case QuerySyncInit(payload=p):
                live = self.pages.live_map(conn, p.query_id)
                resp = self.pages.resume(conn, p, self.maps.live_items(live))
                if resp is not None:
                    fx.send(conn, resp)
            case sv.Search(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                fx.send(conn, self.search.search(p, self._value_of))
            case sv.SearchSub(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                fx.send(conn, self.search.subscribe(conn, p, self._value_of))
            case sv.SearchUnsub(payload=p):
                self.search.unsubscribe(conn, p.subscription_id)
            case rq.VectorSearch(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                fx.send(conn, vector_search(self.vectors, p, self._value_of))
            case rq.HybridSearch(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                found = hybrid_search(
                    self.search, self.vectors, p, self._value_of, self.maps.live_items
                )
                fx.send(conn, found)
            case rq.HybridSearchSub(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                first = self.hybrid.subscribe(
                    conn, self.search, self.vectors, p, self._value_of, self.maps.live_items
                )
                fx.send(conn, first)
            case rq.SqlQuery(payload=p):
                if not self.sql:
                    raise replies.disabled("SQL")

                def may_read(name: str, grants: Grants = c.grants) -> bool:
                    return not durable.is_reserved(name) and grants.may_map(name, "read")

                fx.offload.append(sql.prepare(p, conn, may_read, self.maps.live_items))
            case rq.JournalRead():

                def may_see(name: str, grants: Grants = c.grants) -> bool:
                    return grants.may_map(name, "read")

                fx.offload.append(event_journal.reader(self.journal, conn, message, may_see))
            case sv.JournalSubscribe():

                def may_follow(name: str, grants: Grants = c.grants) -> bool:
                    return grants.may_map(name, "read")

                self.journal_subs.subscribe(self.journal, conn, message, may_follow)
                fx.offload.extend(self.journal_subs.tails(self.journal, self.clock()))
            case rq.JournalUnsubscribe(subscription_id=sub_id):
                self.journal_subs.unsubscribe(conn, sub_id)
            case rq.HybridSearchUnsub(payload=p):
                self.hybrid.unsubscribe(conn, p.subscription_id)
            case rq.HybridQuerySubscribe(payload=p):
                self._require_map(c, p.map_name, "read")
                self._index_inline(fx)
                answer = self.hybrid_queries.subscribe(
                    conn, self.search, p, self._value_of, self.maps.live_items
                )
                fx.send(conn, answer)
            case rq.HybridQueryUnsubscribe(payload=p):
                self.hybrid_queries.unsubscribe(conn, p.subscription_id)
            case tg.QueryUnsub(payload=p):
                self.queries.unsubscribe(conn, p.query_id)
                self.pages.forget(conn, p.query_id)
            case tg.TopicSub(payload=p):
                self._topic_name(p.topic)
                self._require(c.grants.may_topic(p.topic, "subscribe"), "subscribe to", p.topic)
                c.topics.add(p.topic)
                self._topics.setdefault(p.topic, set()).add(conn)
            case tg.TopicUnsub(payload=p):
                c.topics.discard(p.topic)
                self._topics.get(p.topic, set()).discard(conn)
            case tg.TopicPub(payload=p):
                self._publish(fx, conn, c, p)
            case tg.LockRequest(payload=p):
                self._require(c.grants.may_lock(p.name), "take the lock", p.name)
                ttl = None if p.ttl is None else int(p.ttl)
                grants = self.locks.request(conn, p.request_id, p.name, ttl, self.clock())
                self._granted(fx, grants)
            case tg.LockRelease(payload=p):
                released, grants = self.locks.release(
                    conn, p.name, int(p.fencing_token), self.clock()
                )
                reply = tg.LockReleasedPayload(p.name, released, p.request_id)
                fx.send(conn, tg.LockReleased(reply))
                self._granted(fx, grants)
            case tg.CounterRequest(payload=p):
                self._require(c.grants.may_counter(p.name, "read"), "read the counter", p.name)
                counter = self.counters.get(p.name)
                counter.subscribers.add(conn)
                state = tg.CounterState.of(counter.positive, counter.negative)
                fx.send(conn, tg.CounterResponse(tg.CounterStatePayload(p.name, state)))
            case tg.CounterSync(payload=p):
                self._counter_sync(fx, conn, c, p)
            case sv.PartitionMapRequest():
                if self.nodes is None:
                    raise replies.disabled("the partition map")
                now = self.clock()
                self.partitions.observe(self.nodes(), now)
                fx.send(conn, sv.PartitionMap(self.partitions.payload(now, self.hlc.node_id)))
            case tg.Auth() | tg.DeviceHello():
                pass  # the real client sends AUTH twice; TopGun's server ignores the second
            case _:
                requests.serve(fx, conn, message)
        return fx

    # -- writes ---------------------------------------------------------------------------

    def _write(
        self,
        fx: Effects,
        conn: int,
        c: _Conn,
        ops: list[tg.ClientOp],
        batch_level: str | None,
    ) -> None:
        per_op = any(op.write_concern for op in ops)
        if batch_level is not None and batch_level not in RANK:
            raise DecodeError(
                f"unknown write concern {batch_level!r}, expected one of {LEVELS}",
                path="payload.writeConcern",
            )
        wanted = (batch_level or DEFAULT_LEVEL) if ops else DEFAULT_LEVEL
        if per_op:
            levels: list[str] = []
            for i, op in enumerate(ops):
                level = op.write_concern or batch_level or DEFAULT_LEVEL
                if level not in RANK:
                    raise DecodeError(
                        f"unknown write concern {level!r}, expected one of {LEVELS}",
                        path=f"payload.ops[{i}].writeConcern",
                    )
                levels.append(level)
            wanted = max(levels, key=RANK.__getitem__)
        if self.acks_replicated and self.replicated and wanted in ("MEMORY", "APPLIED"):
            wanted = "REPLICATED"
        explicit = batch_level is not None or per_op
        last_id = next((op.id for op in reversed(ops) if op.id is not None), None)
        ack_at = len(fx.out)  # a FIRE_AND_FORGET ack goes first, once refusals are known
        errors: dict[int, str] = {}
        index, kept, recs, encoded = self._validated(fx, conn, c, ops, errors)
        if recs:
            self.maps.hlc.update(max(rec.ts for rec in recs))
        outcomes = self.maps.apply_many(recs)
        if outcomes.count(True) == len(outcomes):  # every op changed state: the usual batch
            fx.records.extend(encoded)
            events = [
                tg.ServerEventPayload(op.map_name, "PUT", op.key, record=op.record)
                if rec.op is _PUT and op.record is not None
                else _event(op, rec)
                for op, rec in zip(kept, recs, strict=True)
            ]
            if self.replicated:
                fx.replicate.extend(encoded)
        else:
            events = []
            for i, op, rec, enc, outcome in zip(index, kept, recs, encoded, outcomes, strict=True):
                if outcome is True:
                    fx.records.append(enc)
                    events.append(_event(op, rec))
                elif isinstance(outcome, CrdtValueError):
                    reason = f"{outcome.name}: {outcome.message}"
                    self._reject(fx, conn, op, errors, i, reason, 400)
                    continue
                if self.replicated and (outcome is True or RANK[wanted] >= RANK["REPLICATED"]):
                    fx.replicate.append(enc)
        self._fan_out(fx, conn, events)
        if last_id is None:
            return
        if errors:
            last_id = covered_last_id(ops, errors)
        if wanted == "FIRE_AND_FORGET":
            ack = self._ack(last_id, wanted, ops, errors, explicit, True)
            fx.out.insert(ack_at, Outbound((conn,), ack))
            return
        if wanted == "REPLICATED" and self.replicated:
            fx.replicated.append(
                Outbound((conn,), self._ack(last_id, wanted, ops, errors, explicit))
            )
            return
        if wanted == "PERSISTED" and self.persistent:
            fx.durable.append(Outbound((conn,), self._ack(last_id, wanted, ops, errors, explicit)))
            return
        achieved = wanted if wanted in ("MEMORY", "APPLIED") else "APPLIED"
        ack = self._ack(last_id, achieved, ops, errors, explicit, achieved == wanted)
        fx.out.append(Outbound((conn,), ack))

    def _validated(
        self, fx: Effects, conn: int, c: _Conn, ops: list[tg.ClientOp], errors: dict[int, str]
    ) -> tuple[list[int], list[tg.ClientOp], list[OpRecord], list[EncodedRecord]]:
        """The ops the token may write, as records validated for the journal (one strict
        decode for the batch), in parallel lists (index in the batch, op, record, encoded
        record); the others rejected. Nothing is applied yet."""
        allowed: dict[str, bool] = {}
        index: list[int] = []
        kept: list[tg.ClientOp] = []
        recs: list[OpRecord] = []
        to_record = tg.client_op_to_record
        for i, op in enumerate(ops):
            name = op.map_name
            may = allowed.get(name)
            if may is None:
                may = allowed[name] = (
                    0 < len(name) <= MAX_MAP_NAME
                    and not durable.is_reserved(name)
                    and c.grants.may_map(name, "write")
                )
                if may and c.grants.may_map(name, "read"):
                    c.maps.add(name)
            if not may:
                reason = (
                    f"no write grant on map {name!r}"
                    if 0 < len(name) <= MAX_MAP_NAME
                    else f"a map name has 1 to {MAX_MAP_NAME} characters, not {len(name)}"
                )
                self._reject(fx, conn, op, errors, i, reason, FORBIDDEN_CODE)
                continue
            try:
                rec = to_record(op)
            except DecodeError as err:
                self._reject(fx, conn, op, errors, i, f"{err.name}: {err.message}", 400)
                continue
            index.append(i)
            kept.append(op)
            recs.append(rec)
        try:
            return index, kept, recs, encode_op_records(recs)
        except InvalidRecord:
            pass
        out: tuple[list[int], list[tg.ClientOp], list[OpRecord], list[EncodedRecord]]
        out = ([], [], [], [])
        for i, op, rec in zip(index, kept, recs, strict=True):  # find which: the slow path, rare
            try:
                enc = encode_record(rec)
            except InvalidRecord as err:
                self._reject(fx, conn, op, errors, i, f"{err.name}: {err.message}", 400)
                continue
            out[0].append(i)
            out[1].append(op)
            out[2].append(rec)
            out[3].append(enc)
        return out

    @staticmethod
    def _reject(
        fx: Effects,
        conn: int,
        op: tg.ClientOp,
        errors: dict[int, str],
        i: int,
        reason: str,
        code: int,
    ) -> None:
        errors[i] = reason
        fx.send(conn, tg.OpRejected(tg.OpRejectedPayload(op.id or "", reason, code)))

    @staticmethod
    def _ack(
        last_id: str,
        level: str,
        ops: list[tg.ClientOp],
        errors: dict[int, str],
        explicit: bool,
        reached: bool = True,
    ) -> bytes:
        """The encoded ``OP_ACK``; with an explicit write concern, or when some op was refused,
        it lists the result of every op that was not refused. A refused op is never listed
        (the real client marks every listed op synced, whatever its ``success``) and never
        covered by ``lastId`` (:func:`covered_last_id`): it stays pending in the client."""
        if not explicit and not errors:
            return tg.encode(tg.OpAck(tg.OpAckPayload(last_id, level)))
        if reached and not errors:  # the usual batch: every op applied at the level asked
            return tg.encode_all_succeeded(last_id, level, [op.id or "" for op in ops])
        short = None if reached else f"only {level} could be achieved"
        results = [
            tg.OpResult(op.id, short is None, level, error=short)
            for i, op in enumerate(ops)
            if i not in errors and op.id is not None
        ]
        return tg.encode(tg.OpAck(tg.OpAckPayload(last_id, level, results)))

    def _fan_out(self, fx: Effects, sender: int, events: list[tg.ServerEventPayload]) -> None:
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
                feed.put(name, key, self._value_of(name, key))
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
        self._index_inline(fx)
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
        runs = [(len(events), tg.encode_event_run(events)) for _, _, events in chunks]
        for (seen, left_out), targets in groups.items():
            parts: list[tuple[int, bytes]] = []
            for (sender, maps, events), run in zip(chunks, runs, strict=True):
                if sender == left_out:
                    continue
                if maps <= seen:
                    parts.append(run)
                else:  # a batch over several maps, not all open here: the rare path
                    some = [e for e in events if e.map_name in seen]
                    parts.append((len(some), tg.encode_event_run(some)))
            if sum(n for n, _ in parts):
                fx.out.append(Outbound(tuple(targets), tg.join_event_runs(parts)))
        return fx

    # -- indexes ----------------------------------------------------------------------------

    def _index_inline(self, fx: Effects) -> None:
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
            return self._value_of(name, key)

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
                self.search, self.vectors, self._value_of, self.maps.live_items
            )
            for target, change in found:
                fx.send(target, change)
        if self.hybrid_queries.any():
            deltas = self.hybrid_queries.flush(self.search, self._value_of, self.maps.live_items)
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
            changes = self.queries.run(self.query_budget, self._value_of, self.maps.live_items)
            for conn, query_id, key, value, kind in changes:
                raw = (
                    NIL if value is None else msgspec.Raw(self.pages.project(conn, query_id, value))
                )
                update = tg.QueryUpdatePayload(query_id, key, raw, kind)
                fx.send(conn, tg.QueryUpdate(update))

    # -- sync -----------------------------------------------------------------------------

    def _sync(self, fx: Effects, conn: int, c: _Conn, message: SyncMessage) -> None:
        name = message.map_name if isinstance(message, SyncInit) else message.payload.map_name
        self._require_map(c, name, "read")
        c.maps.add(name)
        responder = SyncResponder(
            name,
            self.maps.source(name),
            gc_horizon_ms=self.gc_horizon_ms,
            now=self.hlc.now,
        )
        for reply in responder.handle(message):
            fx.send(conn, reply)

    def _or_sync(
        self,
        fx: Effects,
        conn: int,
        c: _Conn,
        message: OrMapSyncInit | tg.ORMapMerkleReqBucket | tg.ORMapDiffRequest,
    ) -> None:
        name = message.map_name if isinstance(message, OrMapSyncInit) else message.payload.map_name
        self._require_map(c, name, "read")
        c.maps.add(name)
        tree = self.maps.or_trees.tree(name)
        if isinstance(message, OrMapSyncInit):
            last = message.last_sync_timestamp
            if last and last < self.gc_horizon_ms:
                reason = f"last sync {int(last)} is before the tombstone GC horizon"
                fx.send(conn, SyncResetRequired(SyncResetPayload(name, reason)))
                return
            stamp = WireTimestamp.of(self.hlc.now())
            fx.send(conn, tg.ORMapSyncRespRoot(tg.ORMapRootPayload(name, tree.root(), stamp)))
        elif isinstance(message, tg.ORMapDiffRequest):
            entries = [self._or_entry(name, k) for k in message.payload.keys]
            fx.send(conn, tg.ORMapDiffResponse(tg.ORMapEntries(name, entries)))
        else:
            path = message.payload.path
            if len(path) < tree.depth:
                buckets = tree.buckets(path)
                fx.send(conn, tg.ORMapSyncRespBuckets(tg.ORMapBucketsPayload(name, path, buckets)))
                return
            tree.leaf(path)  # InvalidBucketPath for a path that is not a leaf
            keys = [k for k in self.maps.store.or_keys(name) if tree.leaf_path(k) == path]
            entries = [self._or_entry(name, k) for k in keys]
            fx.send(conn, tg.ORMapSyncRespLeaf(tg.ORMapLeafPayload(name, path, entries)))

    def _or_entry(self, name: str, key: str) -> tg.ORMapEntry:
        live, removed = self.maps.store.or_entry(name, key)
        records = [
            tg.WireORRecord(msgspec.Raw(r.value), WireTimestamp.of(r.ts), r.op_id) for r in live
        ]
        return tg.ORMapEntry(key, records, sorted(removed))

    def _or_push(self, fx: Effects, conn: int, c: _Conn, p: tg.ORMapEntries) -> None:
        """A client's records for keys the server may lack: adds, and removes of tags the
        server holds live (a client's tombstone list is map-wide; the rest are no news)."""
        name = p.map_name
        self._require_map(c, name, "write")
        events: list[tg.ServerEventPayload] = []
        for entry in p.entries:
            live_tags = {r.op_id for r in self.maps.store.or_entry(name, entry.key)[0]}
            ops = [
                tg.ClientOp(map_name=name, key=entry.key, op_type="OR_ADD", or_record=r)
                for r in entry.records
            ]
            now = WireTimestamp.of(self.hlc.now())
            ops.extend(
                tg.ClientOp(
                    map_name=name, key=entry.key, op_type="OR_REMOVE", or_tag=t, timestamp=now
                )
                for t in entry.tombstones
                if t in live_tags
            )
            for op in ops:
                rec = tg.client_op_to_record(op)
                encoded = encode_record(rec)
                if self.maps.apply(rec):
                    fx.records.append(encoded)
                    events.append(_event(op, rec))
                    if self.replicated:
                        fx.replicate.append(encoded)
        self._fan_out(fx, conn, events)

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
                self._fan_out(fx, 0, events)
        if position is not None and position > self.replica_position:
            self.replica_position = position
            if self.persistent:
                fx.records.append(encode_record(durable.position_record(position, self.hlc.now())))
        return fx

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
            fx.out.append(Outbound(tuple(self._conns), tg.encode(prune)))
        return fx

    # -- topics and counters --------------------------------------------------------------

    def _publish(self, fx: Effects, conn: int, c: _Conn, p: tg.TopicPubPayload) -> None:
        self._topic_name(p.topic)
        self._require(c.grants.may_topic(p.topic, "publish"), "publish to", p.topic)
        targets = tuple(t for t in self._topics.get(p.topic, ()) if t != conn)
        if targets:
            publisher = c.grants.subject or f"connection-{conn}"
            msg = tg.TopicMessage(tg.TopicMessagePayload(p.topic, p.data, publisher, self.clock()))
            fx.out.append(Outbound(targets, tg.encode(msg)))

    def _counter_sync(self, fx: Effects, conn: int, c: _Conn, p: tg.CounterStatePayload) -> None:
        self._require(c.grants.may_counter(p.name, "write"), "write the counter", p.name)
        if len(p.name) > _MAX_COUNTER_NAME:
            raise DecodeError(
                f"a counter name is at most {_MAX_COUNTER_NAME} characters", path="payload.name"
            )
        positive, negative = p.state.sides()
        if any(v > _MAX_TALLY for side in (positive, negative) for v in side.values()):
            raise DecodeError(f"a tally is at most {_MAX_TALLY}", path="payload.state")
        counter = self.counters.get(p.name)
        if counter.merge(positive, negative) and self.persistent:
            rec = durable.counter_record(p.name, counter.positive, counter.negative, self.hlc.now())
            fx.records.append(encode_record(rec))
        counter.subscribers.add(conn)
        state = tg.CounterState.of(counter.positive, counter.negative)
        update = tg.CounterUpdate(tg.CounterStatePayload(p.name, state))
        fx.out.append(Outbound(tuple(sorted(counter.subscribers)), tg.encode(update)))

    # -- helpers --------------------------------------------------------------------------

    def _granted(self, fx: Effects, grants: list[Grant]) -> None:
        """Grants go out once the highest token among them is journaled (with a journal), so
        a restart can never grant a token a client already holds."""
        if not grants:
            return
        out = fx.durable if self.persistent else fx.out
        for g in grants:
            payload = tg.LockGrantedPayload(g.request_id, g.fencing_token, g.name)
            out.append(Outbound((g.conn,), tg.encode(tg.LockGranted(payload))))
        if self.persistent:
            top = max(g.fencing_token for g in grants)
            fx.records.append(encode_record(durable.fence_record(top, self.hlc.now())))

    def _require_map(self, c: _Conn, name: str, action: str) -> None:
        if not 0 < len(name) <= MAX_MAP_NAME:
            raise LimitExceeded(
                f"a map name has 1 to {MAX_MAP_NAME} characters, not {len(name)}",
                path="payload.mapName",
            )
        if durable.is_reserved(name):
            raise Forbidden(
                f"map names starting with {durable.RESERVED_PREFIX!r} are the server's own",
                path="payload.mapName",
            )
        self._require(c.grants.may_map(name, action), f"{action} the map", name)

    @staticmethod
    def _require(allowed: bool, what: str, name: str) -> None:
        if not allowed:
            raise Forbidden(f"the token does not allow to {what} {name!r}", path="payload")

    @staticmethod
    def _topic_name(name: str) -> None:
        if not TOPIC_NAME.match(name):
            raise DecodeError(
                "a topic name is 1-256 of A-Z a-z 0-9 _ - . : /", path="payload.topic"
            )

    def error(self, err: OctosyncError) -> bytes:
        """The ``ERROR`` message for a refused frame."""
        details: dict[str, Any] = {"name": err.name}
        if err.path is not None:
            details["path"] = err.path
        payload = tg.ErrorPayload(err.code, err.message, msgspec.Raw(_ENC.encode(details)))
        return tg.encode(tg.Error(payload))


def _client_int(op_id: str | None) -> int | None:
    """An op id as the real client reads it (``parseInt``: leading decimal digits), None when
    it has none."""
    digits = _LEADING_INT.match(op_id or "")
    return None if digits is None else int(digits.group())


def covered_last_id(ops: Sequence[tg.ClientOp], errors: Mapping[int, str]) -> str:
    """The ``lastId`` of a batch with refused ops: the greatest id of an accepted op below
    every refused op's id, or else ``"0"`` (the client marks every op with ``id <= lastId``
    synced, and its ids start at 1). Accepted ops above it are acknowledged by ``results``."""
    floor = min((n for i in errors if (n := _client_int(ops[i].id)) is not None), default=None)
    best: tuple[int, str] | None = None
    for i, op in enumerate(ops):
        n = _client_int(op.id)
        if i in errors or n is None or op.id is None or (floor is not None and n >= floor):
            continue
        if best is None or n > best[0]:
            best = (n, op.id)
    if best is not None:
        return best[1]
    return "0" if floor is None or floor > 0 else str(floor - 1)


def _event(op: tg.ClientOp, rec: OpRecord) -> tg.ServerEventPayload:
    """The ``SERVER_EVENT`` payload of an applied op; a REMOVE carries ``record`` with a null
    value, because the real client applies LWW events only when ``record`` is present."""
    if rec.op is OpKind.OR_ADD:
        return tg.ServerEventPayload(op.map_name, "OR_ADD", op.key, or_record=op.or_record)
    if rec.op is OpKind.OR_REMOVE:
        return tg.ServerEventPayload(op.map_name, "OR_REMOVE", op.key, or_tag=op.or_tag)
    if op.record is not None and rec.op is _PUT:  # the usual op, first
        return tg.ServerEventPayload(op.map_name, "PUT", op.key, record=op.record)
    if op.record is not None and bytes(op.record.value) == _NIL:
        return tg.ServerEventPayload(op.map_name, rec.op.value, op.key, record=op.record)
    value = NIL if rec.op is OpKind.REMOVE else msgspec.Raw(rec.value)
    record = WireLWWRecord(value, WireTimestamp.of(rec.ts))
    return tg.ServerEventPayload(op.map_name, rec.op.value, op.key, record=record)


def record_events(rec: OpRecord) -> list[tg.ServerEventPayload]:
    """The ``SERVER_EVENT`` payloads of an op record that changed a map (one per tag an OR
    remove lists), for records that came without the client's op (other nodes, repairs)."""
    stamp = WireTimestamp.of(rec.ts)
    if rec.op is OpKind.OR_ADD:
        or_rec = tg.WireORRecord(msgspec.Raw(rec.value), stamp, rec.op_id)
        return [tg.ServerEventPayload(rec.map, "OR_ADD", rec.key, or_record=or_rec)]
    if rec.op is OpKind.OR_REMOVE:
        tags: list[str] = msgspec.msgpack.decode(rec.value, type=list[str])
        return [tg.ServerEventPayload(rec.map, "OR_REMOVE", rec.key, or_tag=t) for t in tags]
    if rec.op is OpKind.INC:
        return []
    value = NIL if rec.op is OpKind.REMOVE else msgspec.Raw(rec.value)
    record = WireLWWRecord(value, stamp)
    return [tg.ServerEventPayload(rec.map, rec.op.value, rec.key, record=record)]
