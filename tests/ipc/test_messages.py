from __future__ import annotations

import msgspec
import pytest

from octosync.ipc.messages import MAX_SAFE_ID, CellSet, Delta, IpcMessage, NodeSnapshot, Snapshot

_decode = msgspec.json.Decoder(IpcMessage).decode


def test_delta_epoch_must_follow_base() -> None:
    with pytest.raises(msgspec.ValidationError, match="base_epoch"):
        _decode(b'{"type":"delta","base_epoch":5,"epoch":5,"ops":[]}')


def test_ids_above_2_pow_53_are_rejected() -> None:
    over = MAX_SAFE_ID + 1
    with pytest.raises(msgspec.ValidationError, match="slot_id"):
        _decode(
            b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"invalidate","slot_id":%d}]}'
            % over
        )


def test_resolved_node_needs_payload() -> None:
    with pytest.raises(msgspec.ValidationError, match="payload"):
        _decode(
            b'{"type":"snapshot","epoch":0,"nodes":[{"slot_id":1,"type_tag":"i32","state":"resolved"}]}'
        )


def test_seed_dialect_shape_round_trips() -> None:
    snap = Snapshot(epoch=2, nodes=(NodeSnapshot(1, "i32", "resolved", b"\x00\x00\x00\x07"),))
    raw = msgspec.json.encode(snap)
    assert b'"type":"snapshot"' in raw
    assert b'"payload":"AAAABw=="' in raw
    assert _decode(raw) == snap
    delta = Delta(base_epoch=2, epoch=3, ops=(CellSet(1, b"\x01"),))
    assert _decode(msgspec.json.encode(delta)) == delta


def test_blob_backend_null_is_the_absent_form_in_the_seed_dialect() -> None:
    from octosync.ipc.messages import BlobRef
    from octosync.wire import json as seed

    raw = b'{"offset":1,"len":2,"generation":3,"epoch":4,"checksum":5,"backend":null}'
    ref = msgspec.json.decode(raw, type=BlobRef)
    assert ref.backend == "shm"
    assert b"backend" not in msgspec.json.encode(ref)
    assert msgspec.json.decode(raw.replace(b"null", b'"arrow"'), type=BlobRef).backend == "arrow"
    with pytest.raises(msgspec.ValidationError, match="backend"):
        msgspec.json.decode(raw.replace(b"null", b'"tape"'), type=BlobRef)
    msg = seed.decode(
        b'{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"cell_set","slot_id":1,"payload":'
        + raw
        + b"}]}"
    )
    assert isinstance(msg, Delta)
    assert msg.ops[0].payload == BlobRef(1, 2, 3, 4, 5)  # type: ignore[union-attr]
