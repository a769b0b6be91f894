"""Sans-I/O Merkle sync session: a requester walks a responder's tree down to differing leaves.

``SYNC_INIT`` -> ``SYNC_RESP_ROOT``; where roots differ the requester asks for the children of
the root (``MERKLE_REQ_BUCKET`` -> ``SYNC_RESP_BUCKETS``), descends only into children whose
hashes differ from its own, and at full depth gets the leaf's records (``SYNC_RESP_LEAF``).
Requests of one level go out together, so a sync takes at most ``depth + 2`` round trips and
moves only the records of differing leaf buckets. A requester whose last sync is older than
the responder's tombstone GC horizon gets ``SYNC_RESET_REQUIRED`` instead: the tombstones that
would have told it about removals are gone, so it must reload from scratch.

Neither side does I/O: the caller moves the returned messages (``run_sync`` does it in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from octosync.crdt.hlc import HLC
from octosync.crdt.lww_map import LWWRecord
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.sync_messages import (
    BucketPath,
    LeafRecord,
    MerkleReqBucket,
    SyncInit,
    SyncMessage,
    SyncResetPayload,
    SyncResetRequired,
    SyncRespBuckets,
    SyncRespBucketsPayload,
    SyncRespLeaf,
    SyncRespLeafPayload,
    SyncRespRoot,
    SyncRespRootPayload,
    WireLWWRecord,
    WireTimestamp,
    raw_value,
)
from octosync.crdt.timestamp import Timestamp
from octosync.errors import LocalProtocolError, RemoteProtocolError

_DEC = msgspec.msgpack.Decoder()


class SyncSource(Protocol):
    """What a responder reads: the tree and the records of one leaf bucket."""

    @property
    def merkle(self) -> MerkleTree: ...

    def leaf_records(self, path: str) -> list[tuple[str, LWWRecord]]: ...


class SyncTarget(Protocol):
    """What a requester writes into: its own tree (to compare) and a record merge."""

    @property
    def merkle(self) -> MerkleTree: ...

    def merge(self, key: str, rec: LWWRecord) -> bool: ...


def to_wire(key: str, rec: LWWRecord) -> LeafRecord:
    return LeafRecord(
        key, WireLWWRecord(raw_value(rec.value), WireTimestamp.of(rec.timestamp), rec.ttl_ms)
    )


def from_wire(item: LeafRecord) -> tuple[str, LWWRecord]:
    r = item.record
    ttl = None if r.ttl_ms is None else int(r.ttl_ms)
    return item.key, LWWRecord(_DEC.decode(r.value), r.timestamp.to_ts(), ttl)


class SyncResponder:
    """Answers sync requests for one map from a :class:`SyncSource`."""

    def __init__(
        self,
        map_name: str,
        source: SyncSource,
        *,
        gc_horizon_ms: int = 0,
        now: Callable[[], Timestamp] | None = None,
    ) -> None:
        """``now`` stamps ``SYNC_RESP_ROOT`` (TopGun's Rust client requires the field); by
        default the source's own HLC when it has one."""
        self.map_name = map_name
        self.source = source
        self.gc_horizon_ms = gc_horizon_ms
        hlc = getattr(source, "hlc", None)
        self._now = now or (
            hlc.now if isinstance(hlc, HLC) else lambda: Timestamp(0, 0, "octosync")
        )
        self.records_sent = 0

    def handle(self, msg: SyncMessage) -> list[SyncMessage]:
        tree = self.source.merkle
        if isinstance(msg, SyncInit):
            self._check_map(msg.map_name)
            last = msg.last_sync_timestamp
            if last and last < self.gc_horizon_ms:
                reason = f"last sync {int(last)} is before the tombstone GC horizon"
                return [SyncResetRequired(SyncResetPayload(self.map_name, reason))]
            stamp = WireTimestamp.of(self._now())
            return [SyncRespRoot(SyncRespRootPayload(self.map_name, tree.root(), stamp))]
        if isinstance(msg, MerkleReqBucket):
            self._check_map(msg.payload.map_name)
            path = msg.payload.path
            if len(path.replace("/", "")) < tree.depth:
                buckets = tree.buckets(path)
                return [SyncRespBuckets(SyncRespBucketsPayload(self.map_name, buckets, path))]
            records = [to_wire(k, r) for k, r in self.source.leaf_records(path)]
            self.records_sent += len(records)
            return [SyncRespLeaf(SyncRespLeafPayload(self.map_name, path, records))]
        raise RemoteProtocolError(f"a sync responder cannot handle {type(msg).__name__}")

    def _check_map(self, name: str) -> None:
        if name != self.map_name:
            raise RemoteProtocolError(
                f"sync for map {name!r} sent to the session of {self.map_name!r}", path="mapName"
            )


class SyncRequester:
    """Pulls one map's differences from a responder into a :class:`SyncTarget`."""

    def __init__(self, map_name: str, target: SyncTarget, last_sync_ms: int | None = None):
        self.map_name = map_name
        self.target = target
        self.last_sync_ms = last_sync_ms
        self.started = False
        self.reset_required = False
        self.pending: set[str] = set()
        self.records_received = 0
        self.received_keys: list[str] = []
        self.changed = 0

    @property
    def done(self) -> bool:
        return self.started and not self.pending

    def start(self) -> SyncInit:
        if self.started:
            raise LocalProtocolError("sync session already started")
        self.started = True
        self.pending.add("init")
        return SyncInit(self.map_name, self.last_sync_ms)

    def receive(self, msg: SyncMessage) -> list[SyncMessage]:
        """Take one response; returns the next requests (empty when this branch is settled)."""
        tree = self.target.merkle
        if isinstance(msg, SyncRespRoot):
            self._settle("init")
            if msg.payload.root_hash == tree.root():
                return []
            self.pending.add("")
            return [MerkleReqBucket(BucketPath(self.map_name, ""))]
        if isinstance(msg, SyncRespBuckets):
            path = msg.payload.path or ""
            self._settle(path)
            return self._descend(path, tree.buckets(path), msg.payload.buckets)
        if isinstance(msg, SyncRespLeaf):
            self._settle(msg.payload.path)
            for item in msg.payload.records:
                key, rec = from_wire(item)
                self.records_received += 1
                self.received_keys.append(key)
                if self.target.merge(key, rec):
                    self.changed += 1
            return []
        if isinstance(msg, SyncResetRequired):
            self.pending.clear()
            self.reset_required = True
            return []
        raise RemoteProtocolError(f"a sync requester cannot handle {type(msg).__name__}")

    def _settle(self, path: str) -> None:
        if path not in self.pending:
            raise RemoteProtocolError(f"unrequested sync response for {path!r}", path="path")
        self.pending.discard(path)

    def _descend(
        self, path: str, mine: dict[str, int], theirs: dict[str, int]
    ) -> list[SyncMessage]:
        depth = self.target.merkle.depth
        out: list[SyncMessage] = []
        for digit, h in sorted(theirs.items()):
            if mine.get(digit, 0) == h:
                continue
            child = path + digit
            if len(child) > depth:
                raise RemoteProtocolError(f"bucket {child!r} below the leaves", path="buckets")
            self.pending.add(child)
            out.append(MerkleReqBucket(BucketPath(self.map_name, child)))
        return out


@dataclass
class SyncStats:
    round_trips: int = 0
    messages: int = 0
    records: int = 0
    bytes_sent: int = 0
    reset_required: bool = False


def run_sync(
    requester: SyncRequester,
    responder: SyncResponder,
    encode: Callable[[Any], bytes] | None = None,
) -> SyncStats:
    """Drive a session in memory, one round trip per wave of requests; counts what moved."""
    stats = SyncStats()
    wave: list[SyncMessage] = [requester.start()]
    while wave:
        stats.round_trips += 1
        replies: list[SyncMessage] = []
        for request in wave:
            replies.extend(responder.handle(request))
        stats.messages += len(wave) + len(replies)
        if encode is not None:
            stats.bytes_sent += sum(len(encode(m)) for m in wave + replies)
        wave = []
        for reply in replies:
            if isinstance(reply, SyncRespLeaf):
                stats.records += len(reply.payload.records)
            wave.extend(requester.receive(reply))
    stats.reset_required = requester.reset_required
    return stats
