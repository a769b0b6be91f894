"""TopGun's server-feature messages (cluster, search, journal, processors, resolvers, partition
map, OR-map sync start, GC) decode strictly and round-trip. The values are this test's own, in
the wire shape of TopGun's Rust message definitions; the reference fixtures for these types are
not among the conformance data here."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.wire import topgun
from octosync.wire import topgun_services as ts

TS = {"millis": 1_800_000_000_123, "counter": 4, "nodeId": "n-a"}
HIT = {"key": "k1", "value": {"t": "x"}, "score": 0.5, "matchedTerms": ["x"]}

MESSAGES: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "PARTITION_MAP": (
        ts.PartitionMap,
        {
            "payload": {
                "version": 3,
                "partitionCount": 16,
                "nodes": [
                    {"nodeId": "a", "endpoints": {"websocket": "ws://h:1"}, "status": "JOINING"}
                ],
                "partitions": [{"partitionId": 2, "ownerNodeId": "a", "backupNodeIds": []}],
                "generatedAt": 1_800_000_000_000.0,
            }
        },
    ),
    "PARTITION_MAP_REQUEST": (ts.PartitionMapRequest, {"payload": {}}),
    "SEARCH": (ts.Search, {"payload": {"requestId": "r", "mapName": "m", "query": "q"}}),
    "SEARCH_RESP": (
        ts.SearchResp,
        {"payload": {"requestId": "r", "results": [HIT], "totalCount": 1}},
    ),
    "SEARCH_SUB": (
        ts.SearchSub,
        {
            "payload": {
                "subscriptionId": "s",
                "mapName": "m",
                "query": "q",
                "options": {"limit": 3, "boost": {"title": 2.0}},
            }
        },
    ),
    "SEARCH_UPDATE": (
        ts.SearchUpdate,
        {"payload": {"subscriptionId": "s", **HIT, "changeType": "LEAVE"}},
    ),
    "SEARCH_UNSUB": (ts.SearchUnsub, {"payload": {"subscriptionId": "s"}}),
    "CLUSTER_SEARCH_REQ": (
        ts.ClusterSearchReq,
        {
            "payload": {
                "requestId": "r",
                "mapName": "m",
                "query": "q",
                "options": {"limit": 7, "afterScore": 0.25, "afterKey": "k0"},
            }
        },
    ),
    "CLUSTER_SEARCH_RESP": (
        ts.ClusterSearchResp,
        {
            "payload": {
                "requestId": "r",
                "nodeId": "b",
                "results": [{"key": "k", "value": 1, "score": 1.0}],
                "totalHits": 1,
                "executionTimeMs": 0,
                "error": "partial",
            }
        },
    ),
    "CLUSTER_SEARCH_SUBSCRIBE": (
        ts.ClusterSearchSubscribe,
        {"payload": {"subscriptionId": "s", "mapName": "m", "query": "q"}},
    ),
    "CLUSTER_SEARCH_UNSUBSCRIBE": (
        ts.ClusterSearchUnsubscribe,
        {"payload": {"subscriptionId": "s"}},
    ),
    "CLUSTER_SEARCH_UPDATE": (
        ts.ClusterSearchUpdate,
        {
            "payload": {
                "subscriptionId": "s",
                "nodeId": "b",
                "key": "k",
                "value": None,
                "score": 0.1,
                "changeType": "ENTER",
            }
        },
    ),
    "CLUSTER_SUB_REGISTER": (
        ts.ClusterSubRegister,
        {
            "payload": {
                "subscriptionId": "s",
                "coordinatorNodeId": "a",
                "mapName": "m",
                "type": "QUERY",
                "queryPredicate": {"op": "eq", "attribute": "x", "value": 1},
                "querySort": {"x": "desc"},
            }
        },
    ),
    "CLUSTER_SUB_ACK": (
        ts.ClusterSubAck,
        {"payload": {"subscriptionId": "s", "nodeId": "b", "success": False, "error": "no"}},
    ),
    "CLUSTER_SUB_UPDATE": (
        ts.ClusterSubUpdate,
        {
            "payload": {
                "subscriptionId": "s",
                "sourceNodeId": "b",
                "key": "k",
                "value": [1, 2],
                "changeType": "UPDATE",
                "timestamp": 5,
            }
        },
    ),
    "CLUSTER_SUB_UNREGISTER": (ts.ClusterSubUnregister, {"payload": {"subscriptionId": "s"}}),
    "ENTRY_PROCESS": (
        ts.EntryProcess,
        {
            "requestId": "r",
            "mapName": "m",
            "key": "k",
            "processor": {"name": "inc", "code": "return v", "args": [1, "a"]},
        },
    ),
    "ENTRY_PROCESS_RESPONSE": (
        ts.EntryProcessResponse,
        {"requestId": "r", "success": False, "error": "not supported"},
    ),
    "REGISTER_RESOLVER": (
        ts.RegisterResolver,
        {"requestId": "r", "mapName": "m", "resolver": {"name": "n", "code": "c"}},
    ),
    "LIST_RESOLVERS": (ts.ListResolvers, {"requestId": "r"}),
    "LIST_RESOLVERS_RESPONSE": (
        ts.ListResolversResponse,
        {"requestId": "r", "resolvers": [{"mapName": "m", "name": "n", "keyPattern": "a*"}]},
    ),
    "MERGE_REJECTED": (
        ts.MergeRejected,
        {"mapName": "m", "key": "k", "attemptedValue": {"a": 1}, "reason": "r", "timestamp": TS},
    ),
    "JOURNAL_EVENT": (
        ts.JournalEvent,
        {
            "event": {
                "sequence": "9",
                "type": "DELETE",
                "mapName": "m",
                "key": "k",
                "timestamp": TS,
                "nodeId": "n-a",
                "metadata": {"why": "gc"},
            }
        },
    ),
    "JOURNAL_SUBSCRIBE": (ts.JournalSubscribe, {"requestId": "r", "types": ["PUT"]}),
    "ORMAP_SYNC_INIT": (
        ts.OrMapSyncInit,
        {"mapName": "m", "rootHash": 2**32 - 1, "bucketHashes": {"a": 0}, "lastSyncTimestamp": 9},
    ),
    "GC_PRUNE": (ts.GcPrune, {"payload": {"olderThan": TS}}),
}


@pytest.mark.parametrize("tag", sorted(MESSAGES))
def test_each_service_message_decodes_and_round_trips(tag: str) -> None:
    cls, body = MESSAGES[tag]
    frame = msgspec.msgpack.encode({"type": tag, **body})
    msg = topgun.decode(frame)
    assert type(msg) is cls
    again = topgun.decode(topgun.encode(msg))
    assert again == msg
    # What goes out is the wire shape that came in (integral floats become ints).
    assert msgspec.msgpack.decode(topgun.encode(msg)) == msgspec.msgpack.decode(frame)


def test_every_service_message_type_is_in_the_codec() -> None:
    tags = {cls.__struct_config__.tag for cls in ts.ServiceMessage.__args__}  # type: ignore[attr-defined]
    assert tags == set(MESSAGES)
    assert len(tags) == 26


@pytest.mark.parametrize(
    ("tag", "change", "path"),
    [
        ("GC_PRUNE", {"payload": {"olderThan": {**TS, "extra": 1}}}, "payload.olderThan"),
        ("ORMAP_SYNC_INIT", {"rootHash": 2**32}, "rootHash"),
        ("JOURNAL_EVENT", {"event": {"sequence": "1", "type": "MOVE"}}, "event.type"),
        ("CLUSTER_SUB_REGISTER", {"payload": {"type": "SEARCH"}}, "payload"),
        ("PARTITION_MAP_REQUEST", {"payload": {"currentVersion": -1}}, "payload.currentVersion"),
        (
            "SEARCH_RESP",
            {"payload": {"requestId": "r", "results": [{"key": "k"}], "totalCount": 0}},
            "payload.results[0]",
        ),
    ],
)
def test_service_messages_are_decoded_strictly(tag: str, change: dict[str, Any], path: str) -> None:
    _, body = MESSAGES[tag]
    with pytest.raises(DecodeError) as info:
        topgun.decode(msgspec.msgpack.encode({"type": tag, **body, **change}))
    assert info.value.path is not None
    assert info.value.path.startswith(path)


@given(st.sampled_from(sorted(MESSAGES)), st.integers(0, 40), st.integers(0, 255))
def test_a_corrupted_service_frame_decodes_or_raises_the_typed_error(
    tag: str, at: int, byte: int
) -> None:
    _, body = MESSAGES[tag]
    frame = bytearray(msgspec.msgpack.encode({"type": tag, **body}))
    frame[at % len(frame)] = byte
    with contextlib.suppress(DecodeError):
        topgun.decode(bytes(frame))
