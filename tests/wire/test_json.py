"""The seed's JSON dialect: shape, strictness, and round trips."""

from __future__ import annotations

import json as stdjson

import pytest
from hypothesis import given

from octosync.errors import DecodeError
from octosync.ipc.messages import (
    MAX_SAFE_ID,
    BlobRef,
    CellSet,
    Delta,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Handshake,
    Invalidate,
    IpcMessage,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    ResyncRequest,
    SlotValue,
    Snapshot,
)
from octosync.wire import json as wire_json
from tests.strategies import handshakes, ipc_messages

# The seed document's examples, with its "base64..." placeholders made real.
SEED_SNAPSHOT = b"""{
  "type": "snapshot", "epoch": 0,
  "nodes": [{ "slot_id": 0, "type_tag": "i32", "state": "resolved", "payload": "AAAAKg==" }],
  "edges": [{ "dependent": 1, "dependency": 0 }],
  "roots": [0]
}"""
SEED_DELTA = b"""{
  "type": "delta", "base_epoch": 0, "epoch": 1,
  "ops": [
    { "op": "cell_set", "slot_id": 0, "payload": "AAAAKw==" },
    { "op": "slot_value", "slot_id": 1, "payload": "AAAAVg==" },
    { "op": "invalidate", "slot_id": 2 },
    { "op": "node_add", "slot_id": 3, "type_tag": "string", "payload": "aGk=" },
    { "op": "node_remove", "slot_id": 4 },
    { "op": "edge_add", "dependent": 5, "dependency": 0 },
    { "op": "edge_remove", "dependent": 5, "dependency": 0 }
  ]
}"""
SEED_HANDSHAKE = b"""{
  "protocol_id": "lazily-ipc", "protocol_major_version": 1, "codec": "json",
  "max_frame_size": 1048576, "fragmentation_supported": false, "ordered_reliable": true,
  "peer_id": 1, "session_id": "abc-123", "features": ["shared-blob", "signaling-relay"]
}"""


def test_seed_snapshot_example_decodes() -> None:
    snap = wire_json.decode(SEED_SNAPSHOT)
    assert snap == Snapshot(
        epoch=0,
        nodes=(NodeSnapshot(0, "i32", "resolved", b"\x00\x00\x00\x2a"),),
        edges=(Edge(1, 0),),
        roots=(0,),
    )


def test_seed_delta_example_decodes_all_seven_ops_in_order() -> None:
    delta = wire_json.decode(SEED_DELTA)
    assert isinstance(delta, Delta)
    assert (delta.base_epoch, delta.epoch) == (0, 1)
    assert delta.ops == (
        CellSet(0, b"\x00\x00\x00\x2b"),
        SlotValue(1, b"\x00\x00\x00\x56"),
        Invalidate(2),
        NodeAdd(3, "string", b"hi"),
        NodeRemove(4),
        EdgeAdd(5, 0),
        EdgeRemove(5, 0),
    )
    assert delta.ops[3].effective_state == "resolved"  # type: ignore[union-attr]


def test_encoded_shape_is_the_seed_dialect() -> None:
    delta = Delta(0, 1, (CellSet(0, b"\x00\x00\x00\x2b"), Invalidate(2), NodeAdd(3, "string")))
    obj = stdjson.loads(wire_json.encode(delta))
    assert obj == {
        "type": "delta",
        "base_epoch": 0,
        "epoch": 1,
        "ops": [
            {"op": "cell_set", "slot_id": 0, "payload": "AAAAKw=="},
            {"op": "invalidate", "slot_id": 2},
            {"op": "node_add", "slot_id": 3, "type_tag": "string"},
        ],
    }
    snap = Snapshot(1, (NodeSnapshot(7, "text/plain", "resolved", BlobRef(0, 16, 1, 9, 5)),))
    node = stdjson.loads(wire_json.encode(snap))["nodes"][0]
    assert node == {
        "slot_id": 7,
        "type_tag": "text/plain",
        "state": "resolved",
        "payload": {"offset": 0, "len": 16, "generation": 1, "epoch": 9, "checksum": 5},
    }


def test_resync_request_shape() -> None:
    raw = wire_json.encode(ResyncRequest(last_epoch=4, reason="EpochGap"))
    assert stdjson.loads(raw) == {"type": "resync_request", "last_epoch": 4, "reason": "EpochGap"}
    assert wire_json.decode(b'{"type":"resync_request"}') == ResyncRequest()


def test_handshake_is_a_bare_object() -> None:
    hs = wire_json.decode_handshake(SEED_HANDSHAKE)
    assert hs.session_id == "abc-123"
    assert hs.features == ("shared-blob", "signaling-relay")
    assert "type" not in stdjson.loads(wire_json.encode_handshake(hs))
    assert wire_json.decode_handshake(wire_json.encode_handshake(hs)) == hs


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b'{"type":"delta","base_epoch":-1,"epoch":0,"ops":[]}', "$.base_epoch"),
        (b'{"type":"snapshot","epoch":-3}', "$.epoch"),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate","slot_id":1.5}]}',
            "$.ops[0].slot_id",
        ),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate","slot_id":"1"}]}',
            "$.ops[0].slot_id",
        ),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate","slot_id":%d}]}'
            % (MAX_SAFE_ID + 1),
            "$.ops[0].slot_id",
        ),
        (b'{"type":"snapshot","epoch":0,"roots":[%d]}' % (MAX_SAFE_ID + 1), "$.roots[0]"),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"explode","slot_id":1}]}',
            "$.ops[0].op",
        ),
        (b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[],"extra":1}', "$.extra"),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate","slot_id":1,"x":2}]}',
            "$.ops[0].x",
        ),
        (b'{"type":"delta","base_epoch":2,"epoch":2,"ops":[]}', "$.epoch"),
        (b'{"type":"delta","base_epoch":0,"epoch":1,"ops":{}}', "$.ops"),
        (b'{"type":"teleport"}', "$.type"),
        (b'{"epoch":1}', "$.type"),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate"}]}',
            "$.ops[0].slot_id",
        ),
        (
            b'{"type":"snapshot","epoch":0,"nodes":[{"slot_id":1,"type_tag":"i32","state":"resolved"}]}',
            "$.nodes[0]",
        ),
        (
            b'{"type":"snapshot","epoch":0,"nodes":[{"slot_id":1,"type_tag":"i32","state":"gone"}]}',
            "$.nodes[0].state",
        ),
        (
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"cell_set","slot_id":1,"payload":"%%%"}]}',
            "$.ops[0].payload",
        ),
        (b'{"type":"resync_request"} {}', "$"),
        (b'{"type":"resync_request"', "$"),
        (b"", "$"),
        (b"\xff\xfe", "$"),
        (b'{"type":"resync_request","reason":"\xc0"}', "$"),
    ],
)
def test_strict_decode_names_the_failing_field(raw: bytes, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        wire_json.decode(raw)
    assert info.value.path == path


def test_decode_error_is_the_project_error_not_msgspecs() -> None:
    with pytest.raises(DecodeError, match="json: ") as info:
        wire_json.decode(b'{"type":"snapshot","epoch":"x"}')
    assert info.value.__cause__ is None
    assert info.value.name == "DecodeError"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (SEED_HANDSHAKE.replace(b'"peer_id": 1', b'"peer_id": -1'), "$.peer_id"),
        (SEED_HANDSHAKE.replace(b'"codec": "json",', b""), "$.codec"),
        (SEED_HANDSHAKE.replace(b'"codec"', b'"codex"'), "$.codex"),
        (SEED_HANDSHAKE.replace(b"false", b'"no"'), "$.fragmentation_supported"),
    ],
)
def test_handshake_decode_is_strict(raw: bytes, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        wire_json.decode_handshake(raw)
    assert info.value.path == path


@given(ipc_messages())
def test_every_message_round_trips(message: IpcMessage) -> None:
    raw = wire_json.encode(message)
    assert wire_json.decode(raw) == message
    assert wire_json.encode(wire_json.decode(raw)) == raw


@given(handshakes)
def test_every_handshake_round_trips(handshake: Handshake) -> None:
    assert wire_json.decode_handshake(wire_json.encode_handshake(handshake)) == handshake
