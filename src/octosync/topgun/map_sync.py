"""Anti-entropy for one map with a client: TopGun's LWW Merkle sync and its OR-map sync."""

from __future__ import annotations

import msgspec

from octosync.crdt.sync import SyncResponder
from octosync.crdt.sync_messages import (
    SyncInit,
    SyncMessage,
    SyncResetPayload,
    SyncResetRequired,
    WireTimestamp,
)
from octosync.store.records import encode_record
from octosync.topgun.access import Conn, require_map
from octosync.topgun.core_view import CoreView
from octosync.topgun.effects import Effects
from octosync.topgun.op_events import op_event
from octosync.wire import topgun as tg
from octosync.wire.topgun_services import OrMapSyncInit


def merkle_sync(core: CoreView, fx: Effects, conn: int, c: Conn, message: SyncMessage) -> None:
    name = message.map_name if isinstance(message, SyncInit) else message.payload.map_name
    require_map(c, name, "read")
    c.maps.add(name)
    responder = SyncResponder(
        name,
        core.maps.source(name),
        gc_horizon_ms=core.gc_horizon_ms,
        now=core.hlc.now,
    )
    for reply in responder.handle(message):
        fx.send(conn, reply)


def or_sync(
    core: CoreView,
    fx: Effects,
    conn: int,
    c: Conn,
    message: OrMapSyncInit | tg.ORMapMerkleReqBucket | tg.ORMapDiffRequest,
) -> None:
    name = message.map_name if isinstance(message, OrMapSyncInit) else message.payload.map_name
    require_map(c, name, "read")
    c.maps.add(name)
    tree = core.maps.or_trees.tree(name)
    if isinstance(message, OrMapSyncInit):
        last = message.last_sync_timestamp
        if last and last < core.gc_horizon_ms:
            reason = f"last sync {int(last)} is before the tombstone GC horizon"
            fx.send(conn, SyncResetRequired(SyncResetPayload(name, reason)))
            return
        stamp = WireTimestamp.of(core.hlc.now())
        fx.send(conn, tg.ORMapSyncRespRoot(tg.ORMapRootPayload(name, tree.root(), stamp)))
    elif isinstance(message, tg.ORMapDiffRequest):
        entries = [_or_entry(core, name, k) for k in message.payload.keys]
        fx.send(conn, tg.ORMapDiffResponse(tg.ORMapEntries(name, entries)))
    else:
        path = message.payload.path
        if len(path) < tree.depth:
            buckets = tree.buckets(path)
            fx.send(conn, tg.ORMapSyncRespBuckets(tg.ORMapBucketsPayload(name, path, buckets)))
            return
        tree.leaf(path)  # InvalidBucketPath for a path that is not a leaf
        keys = [k for k in core.maps.store.or_keys(name) if tree.leaf_path(k) == path]
        entries = [_or_entry(core, name, k) for k in keys]
        fx.send(conn, tg.ORMapSyncRespLeaf(tg.ORMapLeafPayload(name, path, entries)))


def _or_entry(core: CoreView, name: str, key: str) -> tg.ORMapEntry:
    live, removed = core.maps.store.or_entry(name, key)
    records = [tg.WireORRecord(msgspec.Raw(r.value), WireTimestamp.of(r.ts), r.op_id) for r in live]
    return tg.ORMapEntry(key, records, sorted(removed))


def or_push(core: CoreView, fx: Effects, conn: int, c: Conn, p: tg.ORMapEntries) -> None:
    """A client's records for keys the server may lack: adds, and removes of tags the
    server holds live (a client's tombstone list is map-wide; the rest are no news)."""
    name = p.map_name
    require_map(c, name, "write")
    events: list[tg.ServerEventPayload] = []
    for entry in p.entries:
        live_tags = {r.op_id for r in core.maps.store.or_entry(name, entry.key)[0]}
        ops = [
            tg.ClientOp(map_name=name, key=entry.key, op_type="OR_ADD", or_record=r)
            for r in entry.records
        ]
        now = WireTimestamp.of(core.hlc.now())
        ops.extend(
            tg.ClientOp(map_name=name, key=entry.key, op_type="OR_REMOVE", or_tag=t, timestamp=now)
            for t in entry.tombstones
            if t in live_tags
        )
        for op in ops:
            rec = tg.client_op_to_record(op)
            encoded = encode_record(rec)
            if core.maps.apply(rec):
                fx.records.append(encoded)
                events.append(op_event(op, rec))
                if core.replicated:
                    fx.replicate.append(encoded)
    core.fan_out(fx, conn, events)
