"""The plane replica: lazily-spec's CrdtSync frames and register scenarios replayed as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from octosync.crdt.plane import PlaneReplica, stamp_key
from octosync.crdt.replicated import Replicated
from octosync.crdt.shared import SharedState, node_of
from octosync.errors import CrdtValueError, LimitExceeded
from octosync.graph.context import Context
from octosync.ipc.messages import BlobRef, CrdtOp, CrdtSync, WireStamp
from octosync.wire import json_tagged


def load(vectors_dir: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((vectors_dir / "lazily" / name).read_text())
    return doc


def op(node: int, wall: int, peer: int, state: bytes, key: str | None = None) -> CrdtOp:
    return CrdtOp(slot_id=node, stamp=WireStamp(wall, 0, peer), state=state, key=key)


def test_redelivering_each_fixture_frame_applies_nothing(vectors_dir: Path) -> None:
    doc = load(vectors_dir, "distributed/crdt_sync_frames.json")
    replica = PlaneReplica()
    for frame in doc["frames"]:
        message = json_tagged.decode(json.dumps(frame["wire"]).encode())
        assert isinstance(message, CrdtSync)
        inline = [o for o in message.ops if isinstance(o.state, bytes)]
        blobs = [o for o in message.ops if isinstance(o.state, BlobRef)]
        for blob in blobs:  # a shared-memory reference means nothing off its host
            with pytest.raises(CrdtValueError):
                replica.apply(blob)
        first = replica.merge(inline)
        assert replica.merge(inline) == []  # idempotent redelivery: 0 new ops
        assert len(first) == len(inline)


def test_the_greatest_stamp_wins_whatever_the_order() -> None:
    ops = [op(7, 10, 1, b"a"), op(7, 12, 2, b"b"), op(7, 11, 3, b"c")]
    for order in (ops, ops[::-1], [ops[1], ops[0], ops[2]]):
        replica = PlaneReplica()
        replica.merge(order)
        assert replica.get(7, None) == ops[1]


def test_one_stamp_two_states_still_converges() -> None:
    x, y = op(1, 5, 1, b"x"), op(1, 5, 1, b"y")
    a, b = PlaneReplica(), PlaneReplica()
    a.merge([x, y])
    b.merge([y, x])
    assert a.ops() == b.ops() == (y,)


def test_delta_for_sends_only_what_a_frontier_has_not_seen() -> None:
    server = PlaneReplica()
    server.merge([op(1, 1, 1, b"a", "k"), op(2, 2, 2, b"b"), op(3, 3, 1, b"c")])
    client = PlaneReplica()
    client.merge([op(1, 1, 1, b"a", "k")])
    delta = server.delta_for(client.frontier())
    assert [o.slot_id for o in delta] == [2, 3]
    client.merge(delta)
    assert client.ops() == server.ops()
    assert server.delta_for(client.frontier()) == ()


def test_a_replica_refuses_entries_past_its_limit_and_changes_nothing() -> None:
    replica = PlaneReplica(max_entries=2)
    replica.merge([op(1, 1, 1, b"a"), op(2, 1, 1, b"b")])
    with pytest.raises(LimitExceeded):
        replica.check([op(3, 1, 1, b"c")])
    replica.check([op(1, 9, 1, b"newer")])  # an existing entry never counts twice


# --- registers_convergence.json --------------------------------------------------------------

NAME = "x"


class Runner:
    """Drives ``Replicated`` cells through one scenario of the fixture."""

    def __init__(self, kind: str, seed: dict[str, Any]) -> None:
        self.kind = kind
        self.ticks = 0
        self.replicas: dict[str, Replicated] = {}
        self.changed: bool | None = None
        a = self._replica("a", seed["peer"])
        if kind == "lww":
            self._write_lww(a, seed["value"], seed["wall"], seed["logical"], seed["peer"])

    def _clock(self) -> int:
        self.ticks += 1
        return self.ticks

    def _replica(self, name: str, peer: int) -> Replicated:
        replica = Replicated(Context(), SharedState(peer, self._clock))
        self.replicas[name] = replica
        return replica

    def cell(self, name: str) -> Any:
        r = self.replicas[name]
        return {"lww": r.register, "mv": r.multi, "pncounter": r.counter}[self.kind](NAME)

    @staticmethod
    def _write_lww(r: Replicated, value: object, wall: int, logical: int, peer: int) -> None:
        state = json.dumps(value).encode()
        stamp = WireStamp(wall, logical, peer)
        r.merge([CrdtOp(slot_id=node_of(NAME), stamp=stamp, state=state, key=f"{NAME}/lww")])

    def step(self, step: dict[str, Any]) -> None:
        if "fork" in step:
            source = self.replicas["a"]
            self._replica(step["fork"], step["peer"]).merge(source.state.replica.ops())
            return
        if "merge" in step:
            into, source = self.replicas[step["merge"]["into"]], step["merge"]["from"]
            before = self.cell(step["merge"]["into"]).value
            moved = into.merge(self.replicas[source].state.replica.ops())
            self.changed = NAME in moved
            assert self.changed == (self.cell(step["merge"]["into"]).value != before)
            return
        r = self.replicas[step["on"]]
        assert r.state.peer == step["peer"]
        if self.kind == "lww":
            self._write_lww(r, step["value"], step["wall"], step["logical"], step["peer"])
        elif self.kind == "mv":
            self.cell(step["on"]).set(step["value"])
        else:
            amount = step["amount"] if step["op"] == "incr" else -step["amount"]
            self.cell(step["on"]).add(amount)


def scenarios(vectors_dir: Path) -> list[dict[str, Any]]:
    return list(load(vectors_dir, "collections/registers_convergence.json")["scenarios"])


def test_every_register_scenario_is_replayed(vectors_dir: Path) -> None:
    assert len(scenarios(vectors_dir)) == 9
    for scenario in scenarios(vectors_dir):
        runner = Runner(scenario["register"], scenario["seed"])
        for step in scenario["steps"]:
            runner.step(step)
        expect = scenario["expect"]
        for name, value in expect.get("value_on", {}).items():
            assert runner.cell(name).value == value, scenario["id"]
        for name, values in expect.get("values_on", {}).items():
            assert sorted(runner.cell(name).value) == sorted(values), scenario["id"]
        for name, stamp in expect.get("stamp_on", {}).items():
            entry = runner.replicas[name].state.replica.get(node_of(NAME), f"{NAME}/lww")
            assert entry is not None
            want = (stamp["wall"], stamp["logical"], stamp["peer"])
            assert stamp_key(entry.stamp) == want, scenario["id"]
        if "changed" in expect:
            assert runner.changed is expect["changed"], scenario["id"]
