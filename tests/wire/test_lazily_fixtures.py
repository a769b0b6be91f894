"""lazily-spec conformance fixtures through the tagged JSON and MsgPack dialects.

Each fixture is decoded from its own wire form, checked against its ``assertions``/``expect``,
re-encoded, decoded again and compared; where a fixture pins bytes (``nodekey_null_leniency``)
the exact input bytes are checked by their FNV-1a-64.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from octosync.errors import DecodeError
from octosync.ipc.messages import (
    BlobRef,
    CellSet,
    CrdtSync,
    Delta,
    EdgeAdd,
    EdgeRemove,
    Invalidate,
    IpcMessage,
    NodeAdd,
    NodeRemove,
    OutboxAck,
    SlotValue,
    Snapshot,
)
from octosync.wire import json_tagged, msgpack
from tests.vectors.extract import LAZILY_FILES

OP_VARIANT = {
    CellSet: "CellSet",
    SlotValue: "SlotValue",
    Invalidate: "Invalidate",
    NodeAdd: "NodeAdd",
    NodeRemove: "NodeRemove",
    EdgeAdd: "EdgeAdd",
    EdgeRemove: "EdgeRemove",
}


def load(vectors_dir: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((vectors_dir / "lazily" / name).read_text())
    return doc


def from_json(obj: Any) -> IpcMessage:
    return json_tagged.decode(json.dumps(obj).encode())


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_fnv1a64_reference_vectors() -> None:
    assert fnv1a64(b"") == "cbf29ce484222325"
    assert fnv1a64(b"a") == "af63dc4c8601ec8c"


def node_payload(snap: Snapshot, index: int) -> Any:
    payload = snap.nodes[index].payload
    return list(payload) if isinstance(payload, bytes) else payload


def check_snapshot(snap: Snapshot, a: dict[str, Any]) -> None:
    checks = {
        "epoch": snap.epoch,
        "node_count": len(snap.nodes),
        "edge_count": len(snap.edges),
        "root_count": len(snap.roots),
        "roots": list(snap.roots),
        "first_node_type_tag": snap.nodes[0].type_tag if snap.nodes else None,
        "first_node_payload": node_payload(snap, 0) if snap.nodes else None,
        "first_edge": [snap.edges[0].dependent, snap.edges[0].dependency] if snap.edges else None,
        "has_opaque_node": any(n.state == "opaque" for n in snap.nodes),
    }
    for key, want in a.items():
        if key in checks:
            assert checks[key] == want, key
    if "opaque_node_id" in a:
        (opaque,) = [n for n in snap.nodes if n.state == "opaque"]
        assert opaque.slot_id == a["opaque_node_id"]
    if "opaque_node_state_tag" in a:
        assert a["opaque_node_state_tag"] == "Opaque"
    if a.get("first_node_state_kind") == "SharedBlob":
        blob = snap.nodes[0].payload
        assert isinstance(blob, BlobRef)
        assert (blob.offset, blob.len, blob.epoch) == (
            a["blob_offset"],
            a["blob_len"],
            a["blob_epoch"],
        )


def check_delta(delta: Delta, a: dict[str, Any]) -> None:
    variants = [OP_VARIANT[type(op)] for op in delta.ops]
    checks = {
        "base_epoch": delta.base_epoch,
        "epoch": delta.epoch,
        "op_count": len(delta.ops),
        "op_variants": variants,
        "is_sequential": delta.epoch == delta.base_epoch + 1,
        "has_all_op_variants": set(variants) == set(OP_VARIANT.values()),
        "first_op_kind": variants[0] if variants else None,
    }
    for key, want in a.items():
        if key in checks:
            assert checks[key] == want, key
    if "first_op_payload" in a:
        first = delta.ops[0]
        assert isinstance(first, CellSet)
        assert isinstance(first.payload, bytes)
        assert list(first.payload) == a["first_op_payload"]
    if "first_op_payload_kind" in a:
        first = delta.ops[0]
        assert isinstance(first, SlotValue)
        assert a["first_op_payload_kind"] == "SharedBlob"
        assert isinstance(first.payload, BlobRef)
    if "node_add_type_tag" in a:
        (add,) = [op for op in delta.ops if isinstance(op, NodeAdd)]
        assert add.type_tag == a["node_add_type_tag"]


def check_crdt(sync: CrdtSync, a: dict[str, Any]) -> None:
    frontier = sync.frontier or ()
    checks = {
        "frontier_len": len(frontier),
        "op_count": len(sync.ops),
        "frontier_omitted": sync.frontier is None,
        "has_keyed_op": any(o.key is not None for o in sync.ops),
        "has_keyless_op": any(o.key is None for o in sync.ops),
        "frontier_first_peer": frontier[0][0] if frontier else None,
        "frontier_first_stamp_wall_time": frontier[0][1].wall_time if frontier else None,
        "first_op_node": sync.ops[0].slot_id if sync.ops else None,
        "first_op_key_absent": sync.ops[0].key is None if sync.ops else None,
        "second_op_node": sync.ops[1].slot_id if len(sync.ops) > 1 else None,
        "second_op_key": sync.ops[1].key if len(sync.ops) > 1 else None,
        "second_op_stamp_peer": sync.ops[1].stamp.peer if len(sync.ops) > 1 else None,
    }
    for key, want in a.items():
        if key in checks:
            assert checks[key] == want, key


def check(message: IpcMessage, a: dict[str, Any]) -> None:
    if isinstance(message, Snapshot):
        check_snapshot(message, a)
    elif isinstance(message, Delta):
        check_delta(message, a)
    else:
        assert isinstance(message, CrdtSync)
        check_crdt(message, a)


TOP_LEVEL = [name for name in LAZILY_FILES if "/" not in name and name != "arena_blob.json"]
"""Wire messages; ``arena_blob.json`` is the arena host's contract (``tests/shm``)."""


def test_every_top_level_fixture_is_tested() -> None:
    assert len(TOP_LEVEL) == 6


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_fixture(vectors_dir: Path, name: str) -> None:
    doc = load(vectors_dir, name)
    message = from_json(doc["wire"])
    assert type(message).__name__ == doc["kind"]
    check(message, doc["assertions"])
    # Re-encoded, it is the fixture's own JSON value again (key omitted, unit variant bare).
    assert json.loads(json_tagged.encode(message)) == doc["wire"]
    again = json_tagged.decode(json_tagged.encode(message))
    assert again == message
    check(again, doc["assertions"])
    via_msgpack = msgpack.decode(msgpack.encode(message))
    assert via_msgpack == message
    check(via_msgpack, doc["assertions"])


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_frame_roundtrip_fixture(vectors_dir: Path, codec: str) -> None:
    doc = load(vectors_dir, f"codec/frame_roundtrip_{codec}.json")
    assert doc["assertions"]["scenario_count"] == len(doc["scenarios"]) == 3
    mod = json_tagged if codec == "json" else msgpack
    for sc in doc["scenarios"]:
        source = from_json(sc["wire"])
        encoded = mod.encode(source)
        second = mod.decode(encoded)
        expect = dict(sc["expect"])
        assert (second == source) is expect.pop("round_trip_equals_source"), sc["id"]
        assert type(second).__name__ == sc["variant"]
        raw = msgspec.msgpack.decode(encoded) if codec == "msgpack" else json.loads(encoded)
        (envelope_key,) = raw
        body = raw[envelope_key]
        if "encoded_envelope_key" in expect:
            assert envelope_key == expect.pop("encoded_envelope_key")
        if "encoded_body_field_names" in expect:
            assert sorted(body) == expect.pop("encoded_body_field_names")
        if "first_node_encoded_field_names" in expect:
            assert sorted(body["nodes"][0]) == expect.pop("first_node_encoded_field_names")
        for which, i in (("first", 0), ("second", 1)):
            field = f"{which}_op_encoded_field_names"
            if field in expect:
                assert sorted(body["ops"][i]) == expect.pop(field)
        check(second, expect)
        if codec == "json":
            assert raw == sc["wire"]


def test_nodekey_null_leniency_fixture(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "codec/nodekey_null_leniency.json")
    scenarios = doc["scenarios"]
    assert len(scenarios) == doc["assertions"]["scenario_count"] == 12
    for sc in scenarios:
        expect = sc["expect"]
        if sc["codec"] == "json":
            data, mod = sc["wire_json"].encode(), json_tagged
        else:
            data, mod = bytes.fromhex(sc["wire_msgpack_hex"]), msgpack
        assert fnv1a64(data) == expect["wire_input_fnv1a64"], sc["id"]
        message = mod.decode(data)
        if sc["field"] == "snapshot":
            assert isinstance(message, Snapshot)
            node = message.nodes[0]
            fields = (node.slot_id, node.type_tag, node.payload, node.key, message.epoch)
        else:
            assert isinstance(message, Delta)
            add = message.ops[0]
            assert isinstance(add, NodeAdd)
            fields = (add.slot_id, add.type_tag, add.payload, add.key, message.epoch)
        want_payload = bytes(expect["payload"])
        assert fields == (
            expect["node"],
            expect["type_tag"],
            want_payload,
            expect["decoded_key"],
            expect["epoch"],
        ), sc["id"]
        reencoded = mod.encode(message)
        raw = msgspec.msgpack.decode(reencoded) if mod is msgpack else json.loads(reencoded)
        if sc["field"] == "snapshot":
            encoded_node = raw["Snapshot"]["nodes"][0]
        else:
            encoded_node = raw["Delta"]["ops"][0]["NodeAdd"]
        assert ("key" in encoded_node) is expect["reencoded_key_field_present"], sc["id"]
        assert mod.decode(reencoded) == message


def test_msgpack_accepts_bin_payloads_too() -> None:
    raw = msgspec.msgpack.encode(
        {
            "Delta": {
                "base_epoch": 0,
                "epoch": 1,
                "ops": [{"CellSet": {"node": 1, "payload": {"Inline": b"\x01\xff"}}}],
            }
        }
    )
    assert msgpack.decode(raw) == Delta(0, 1, (CellSet(1, b"\x01\xff"),))


def test_crdt_sync_frames_fixture(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "distributed/crdt_sync_frames.json")
    assert len(doc["frames"]) == 4
    for frame in doc["frames"]:
        message = from_json(frame["wire"])
        assert isinstance(message, CrdtSync)
        check_crdt(message, frame["assertions"])
        encoded = json.loads(json_tagged.encode(message))
        assert encoded == frame["wire"], frame["label"]
        for op in encoded["CrdtSync"]["ops"]:
            assert "key" in op  # always written, null when unset
        assert msgpack.decode(msgpack.encode(message)) == message


def test_outbox_ack_frames(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "reliable-sync/idempotent_redelivery.json")
    ack = from_json(doc["wire"])
    assert ack == OutboxAck(through_epoch=42)
    assert json.loads(json_tagged.encode(ack)) == doc["wire"]
    assert msgpack.decode(msgpack.encode(ack)) == ack


@pytest.mark.parametrize(
    ("wire", "path"),
    [
        ({}, "$"),
        (
            {"Snapshot": {"epoch": 1, "nodes": [], "edges": [], "roots": []}, "Delta": None},
            "$.Delta",
        ),
        ({"OutboxAck": {"through_epoch": 1}, "ResyncRequest": {"from_epoch": 1}}, "$"),
        ({"Delta": {"base_epoch": 3, "epoch": 3, "ops": []}}, "$.Delta.epoch"),
        ({"Delta": {"base_epoch": -1, "epoch": 0, "ops": []}}, "$.Delta.base_epoch"),
        (
            {"Delta": {"base_epoch": 0, "epoch": 1, "ops": [{"QueuePush": {"node": 7}}]}},
            "$.Delta.ops[0].QueuePush",
        ),
        ({"Delta": {"base_epoch": 0, "epoch": 1, "ops": [{}]}}, "$.Delta.ops[0]"),
        (
            {"Delta": {"base_epoch": 0, "epoch": 1, "ops": [{"Invalidate": {"node": 2**53 + 1}}]}},
            "$.Delta.ops[0].Invalidate.node",
        ),
        (
            {
                "Delta": {
                    "base_epoch": 0,
                    "epoch": 1,
                    "ops": [{"CellSet": {"node": 1, "payload": {"Inline": [256]}}}],
                }
            },
            "$.Delta.ops[0].CellSet.payload.Inline[0]",
        ),
        (
            {
                "Delta": {
                    "base_epoch": 0,
                    "epoch": 1,
                    "ops": [{"CellSet": {"node": 1, "payload": {"Inline": "AAE="}}}],
                }
            },
            "$.Delta.ops[0].CellSet.payload.Inline",
        ),
        (
            {
                "Delta": {
                    "base_epoch": 0,
                    "epoch": 1,
                    "ops": [
                        {"CellSet": {"node": 1, "payload": {"Inline": [1], "SharedBlob": None}}}
                    ],
                }
            },
            "$.Delta.ops[0].CellSet.payload.SharedBlob",
        ),
        (
            {
                "Delta": {
                    "base_epoch": 0,
                    "epoch": 1,
                    "ops": [{"Invalidate": {"node": 1}, "NodeRemove": {"node": 1}}],
                }
            },
            "$.Delta.ops[0]",
        ),
        (
            {
                "Snapshot": {
                    "epoch": 1,
                    "nodes": [{"node": 1, "type_tag": "i32", "state": {}}],
                    "edges": [],
                    "roots": [],
                }
            },
            "$.Snapshot.nodes[0].state",
        ),
        (
            {
                "Snapshot": {
                    "epoch": 1,
                    "nodes": [{"node": 1, "type_tag": "i32", "state": "Gone"}],
                    "edges": [],
                    "roots": [],
                }
            },
            "$.Snapshot.nodes[0].state",
        ),
        (
            {
                "Snapshot": {
                    "epoch": 1,
                    "nodes": [{"node": 1, "type_tag": "i32", "state": "Opaque", "key": "/bad"}],
                    "edges": [],
                    "roots": [],
                }
            },
            "$.Snapshot.nodes[0].key",
        ),
        ({"Snapshot": {"epoch": 1, "nodes": [], "edges": []}}, "$.Snapshot.roots"),
        ({"type": "snapshot", "epoch": 1}, "$.type"),
        ({"ResyncRequest": {}}, "$.ResyncRequest.from_epoch"),
    ],
)
def test_tagged_decode_is_strict_in_both_codecs(wire: Any, path: str) -> None:
    for mod, data in (
        (json_tagged, json.dumps(wire).encode()),
        (msgpack, msgspec.msgpack.encode(wire)),
    ):
        with pytest.raises(DecodeError) as info:
            mod.decode(data)
        assert info.value.path == path, mod.__name__


def test_trailing_bytes_are_refused() -> None:
    good = Delta(0, 1, (Invalidate(1),))
    for mod in (json_tagged, msgpack):
        with pytest.raises(DecodeError) as info:
            mod.decode(mod.encode(good) + b"\x00")
        assert info.value.path == "$"


def test_looks_tagged_tells_the_dialects_apart() -> None:
    from octosync.wire import json as seed_json

    delta = Delta(0, 1, ())
    assert json_tagged.looks_tagged(json_tagged.encode(delta))
    assert json_tagged.looks_tagged(b' { "Snapshot": {}}')
    assert not json_tagged.looks_tagged(seed_json.encode(delta))
    assert not json_tagged.looks_tagged(b"")


@pytest.mark.parametrize("fixture", ["delta_shared_blob.json", "snapshot_shared_blob.json"])
def test_blob_backend_null_reads_as_shm_and_goes_out_omitted(
    vectors_dir: Path, fixture: str
) -> None:
    """lazily-spec § Zero-copy transport: an explicit ``backend: null`` is the absent form."""
    doc = json.loads((vectors_dir / "lazily" / fixture).read_text())
    blobs: list[dict[str, Any]] = []

    def find(node: Any) -> None:
        if isinstance(node, dict):
            if "SharedBlob" in node:
                blobs.append(node["SharedBlob"])
            for v in node.values():
                find(v)
        elif isinstance(node, list):
            for v in node:
                find(v)

    wire = copy.deepcopy(doc["wire"])
    find(wire)
    assert blobs, "the fixture carries a shared blob"
    for blob in blobs:
        blob["backend"] = None
    for mod, data in (
        (json_tagged, json.dumps(wire).encode()),
        (msgpack, msgspec.msgpack.encode(wire)),
    ):
        msg = mod.decode(data)
        refs = [
            p
            for p in _payloads(msg)  # every payload the message carries
            if isinstance(p, BlobRef)
        ]
        assert refs
        assert all(r.backend == "shm" for r in refs)
        assert b"backend" not in mod.encode(msg)
    for blob in blobs:
        blob["backend"] = "tape"
    with pytest.raises(DecodeError, match=r"tape|backend"):
        json_tagged.decode(json.dumps(wire).encode())


def _payloads(msg: Any) -> list[Any]:
    if isinstance(msg, Snapshot):
        return [n.payload for n in msg.nodes]
    return [getattr(op, "payload", None) for op in msg.ops]
