"""lazily-spec reliable-sync and gap fixtures replayed against the Mirror."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from octosync.errors import DecodeError
from octosync.ipc.messages import Delta, Edge, NodeSnapshot, ResyncRequest, Snapshot
from octosync.ipc.mirror import Applied, Ignored, Mirror
from octosync.wire import json_tagged


def load(vectors_dir: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((vectors_dir / "lazily" / name).read_text())
    return doc


def frame(obj: Any) -> Any:
    return json_tagged.decode(json.dumps(obj).encode())


def mirror_with(epoch: int, state: dict[str, list[int]]) -> Mirror:
    """A mirror at ``epoch`` holding ``state`` ({node: bytes}) as untyped byte cells."""
    m = Mirror()
    nodes = tuple(NodeSnapshot(int(k), "bytes", "resolved", bytes(v)) for k, v in state.items())
    assert m.apply(Snapshot(epoch, nodes)) == Applied(epoch)
    return m


def raw_values(m: Mirror) -> dict[str, list[int]]:
    return {str(k): list(v) for k, v in m.values().items()}


def test_idempotent_redelivery(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "reliable-sync/idempotent_redelivery.json")
    assert len(doc["scenarios"]) == 2
    for sc in doc["scenarios"]:
        m = mirror_with(sc["start_last_epoch"], sc["state_before"])
        for inbound in sc["inbound"]:
            result = m.apply(frame(inbound["frame"]))
            assert inbound["expect_action"] == "Ignore"
            assert isinstance(result, Ignored), sc["id"]
            assert result.reason == "already_applied"
            assert m.last_epoch == inbound["last_epoch_after"]
        assert m.last_epoch == sc["expect"]["final_last_epoch"]
        assert raw_values(m) == sc["expect"]["state_after"]
        assert m.in_sync


def test_non_sequential_delta_after_epoch_10_requests_resync(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "delta_non_sequential.json")
    assert doc["assertions"]["resync_after_epoch_10"] is True
    m = mirror_with(10, {})
    result = m.apply(frame(doc["wire"]))
    assert result == ResyncRequest(last_epoch=10, reason="EpochGap")
    assert not m.in_sync
    assert m.last_epoch == 10


def test_sequential_delta_fixture_applies_on_a_graph_that_has_its_nodes(
    vectors_dir: Path,
) -> None:
    doc = load(vectors_dir, "delta_sequential.json")
    m = mirror_with(40, {"1": [0], "2": [0], "3": [0], "5": [0]})
    assert m.apply(frame(doc["wire"])) == Applied(41)
    # CellSet 1 -> [10], SlotValue 2 -> [20], Invalidate 3, NodeAdd 4 (u64, [64]), NodeRemove 5.
    assert raw_values(m) == {"1": [10], "2": [20], "4": [64]}
    assert {n.slot_id: n.state for n in m.nodes}[3] == "dirty"
    assert m.edges == (Edge(2, 1),)  # EdgeAdd 2->1, then EdgeRemove 3->1 (absent: no-op)
    # Re-delivered: ignored; on a graph missing node 5 it would be a protocol error instead.
    assert m.apply(frame(doc["wire"])) == Ignored(41, "already_applied")
    fresh = mirror_with(40, {"1": [0]})
    assert isinstance(fresh.apply(frame(doc["wire"])), ResyncRequest)
    assert raw_values(fresh) == {"1": [0]}


def test_state_suffix_collapses_to_snapshot(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "reliable-sync/coalesce_bounds_outbox.json")
    sc = {s["id"]: s for s in doc["scenarios"]}["state_suffix_collapses_to_snapshot"]
    start = sc["expect"]["receiver_from_last_epoch"]
    full_run = mirror_with(start, {"1": [], "2": []})
    for body in sc["appended"]:
        assert isinstance(full_run.apply(frame({"Delta": body})), Applied)
    # The fixture's coalesced Snapshot is schematic (nodes without type_tag/state, no roots):
    # the strict decoder refuses it, naming the first missing field ...
    with pytest.raises(DecodeError) as info:
        frame(sc["coalesce"]["wire"])
    assert info.value.path is not None
    assert info.value.path.startswith("$.Snapshot")
    # ... so the test spells it out as a conforming Snapshot carrying the same values.
    body = sc["coalesce"]["wire"]["Snapshot"]
    coalesced = Snapshot(
        body["epoch"],
        tuple(
            NodeSnapshot(n["node"], "bytes", "resolved", bytes(n["payload"]["Inline"]))
            for n in body["nodes"]
        ),
    )
    adopter = mirror_with(start, {"1": [], "2": []})
    assert sc["expect"]["action"] == "Apply"
    assert adopter.apply(coalesced) == Applied(sc["expect"]["receiver_last_epoch_after"])
    assert sc["expect"]["graph_equals_full_run"] is True
    assert adopter.snapshot() == full_run.snapshot()
    assert full_run.last_epoch == adopter.last_epoch == 3


def test_queue_cell_ops_are_refused_typed_but_the_fused_span_decodes(
    vectors_dir: Path,
) -> None:
    doc = load(vectors_dir, "reliable-sync/coalesce_bounds_outbox.json")
    fused = doc["wire"]  # base 0 -> epoch 3 of QueuePush ops: the ops are not supported
    with pytest.raises(DecodeError) as info:
        frame(fused)
    assert info.value.path == "$.Delta.ops[0].QueuePush"
    empty = frame({"Delta": {**fused["Delta"], "ops": []}})
    assert (empty.base_epoch, empty.epoch, empty.span) == (0, 3, 3)
    unit = {s["id"]: s for s in doc["scenarios"]}["oplog_declines_snapshot_fuses_batch"]
    with pytest.raises(DecodeError) as info:
        frame({"Delta": unit["appended"][0]})
    assert info.value.path == "$.Delta.ops[0].QueuePush"


def test_a_fused_state_suffix_applies_like_its_unit_deltas(vectors_dir: Path) -> None:
    """The fixture's three unit deltas, fused into one span-3 delta (lazily-spec's batch
    fusion), land where the fold of the units lands and where the coalesced snapshot does."""
    doc = load(vectors_dir, "reliable-sync/coalesce_bounds_outbox.json")
    sc = {s["id"]: s for s in doc["scenarios"]}["state_suffix_collapses_to_snapshot"]
    units = sc["appended"]
    fused = frame(
        {
            "Delta": {
                "base_epoch": units[0]["base_epoch"],
                "epoch": units[-1]["epoch"],
                "ops": [op for u in units for op in u["ops"]],
            }
        }
    )
    assert fused.span == len(units) == 3
    start = sc["peer_acked_through"]
    folded = mirror_with(start, {"1": [], "2": []})
    for u in units:
        assert folded.apply(frame({"Delta": u})) == Applied(u["epoch"])
    batch = mirror_with(start, {"1": [], "2": []})
    assert batch.apply(fused) == Applied(sc["expect"]["receiver_last_epoch_after"])
    assert batch.snapshot() == folded.snapshot()
    coalesced = sc["coalesce"]["wire"]["Snapshot"]  # schematic: compare the values it names
    assert batch.last_epoch == coalesced["epoch"]
    assert raw_values(batch) == {str(n["node"]): n["payload"]["Inline"] for n in coalesced["nodes"]}
    # Re-delivered after it applied: ignored, not applied twice.
    assert batch.apply(fused) == Ignored(3, "already_applied")


def test_the_gap_rule_applies_to_base_epoch_at_any_span(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "reliable-sync/coalesce_bounds_outbox.json")
    span = frame({"Delta": {**doc["wire"]["Delta"], "ops": []}})  # 0 -> 3
    for last in (1, 2):  # inside the span but not at its base: a gap, not a re-delivery
        m = mirror_with(last, {})
        assert m.apply(span) == ResyncRequest(last_epoch=last, reason="EpochGap")
        assert m.last_epoch == last
        assert not m.in_sync


def test_outbox_ack_is_not_applied_by_the_mirror(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "reliable-sync/coalesce_bounds_outbox.json")
    sc = {s["id"]: s for s in doc["scenarios"]}["non_ack_fills_then_ack_drains_cursor_queue"]
    ack = frame({"OutboxAck": sc["outbox_ack"]})
    m = mirror_with(4, {})
    assert m.apply(ack) == Ignored(4, "not_state_plane")
    assert m.apply(Delta(4, 5, ())) == Applied(5)
