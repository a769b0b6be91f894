"""One connection or stream can never hurt another: faces, limits, faults and the recorder."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from octosync.errors import (
    Forbidden,
    InternalError,
    InvalidRecord,
    LimitExceeded,
    RemoteProtocolError,
)
from octosync.hub import DiffFrame, Hub, HubConfig, OutFrame, SnapshotFrame, ViewKey, lazily_frame
from octosync.hub.limits import MAX_EPOCH, Limits
from octosync.hub.model import Frame
from octosync.ipc.messages import Delta, NodeAdd, NodeRemove
from tests.hub.helpers import RefSubscriber, cell_set, json_encoder, snap

WVP = ViewKey("wvp", "wvp/ws")
LAZILY = ViewKey("lazily", "json")


def wvp_encoder(frame: OutFrame) -> bytes:
    return repr(frame.body).encode()


def make_hub(recorder: Any = None, **config: Any) -> tuple[Hub, list[int]]:
    woken: list[int] = []
    hub = Hub(
        HubConfig(**config),
        clock=lambda: 0.0,
        encoders={"json": json_encoder, "wvp/ws": wvp_encoder},
        recorder=recorder,
    )
    return hub, woken


def test_a_lazily_connection_cannot_touch_a_wvp_stream_and_back() -> None:
    hub, woken = make_hub()
    hub.connect(1, LAZILY, wake=woken.append)
    hub.connect(2, WVP, wake=woken.append)
    hub.publish(2, "warp:9", SnapshotFrame(0, {"graph": 1}))
    with pytest.raises(Forbidden) as err:
        hub.subscribe(1, "warp:9")
    assert err.value.path == "stream"
    with pytest.raises(Forbidden):
        hub.publish(1, "warp:9", lazily_frame(snap(0, {1: b"a"})))
    with pytest.raises(Forbidden):
        hub.write(1, "warp:9", cell_set(0, 1, b"x"))
    with pytest.raises(Forbidden):
        hub.subscribe(2, "scores")
    assert hub.epoch_of("warp:9") == 0
    assert hub.producer_of("warp:9") == 2
    with pytest.raises(Forbidden):
        hub.check_stream(LAZILY, "warp:1")


def test_limits_refuse_before_anything_changes() -> None:
    hub, woken = make_hub(limits=Limits(max_stream_name=8))
    hub.connect(2, WVP, wake=woken.append)
    hub.publish(2, "warp:1", SnapshotFrame(0, {"g": 0}))
    with pytest.raises(LimitExceeded) as err:
        hub.publish(2, "warp:1", DiffFrame(0, MAX_EPOCH + 1, {"ops": []}))
    assert err.value.path == "to_epoch"
    with pytest.raises(LimitExceeded):
        hub.publish(2, "warp:1", SnapshotFrame(MAX_EPOCH + 1, {"g": 1}))
    assert hub.epoch_of("warp:1") == 0
    hub.connect(1, LAZILY, wake=woken.append)
    with pytest.raises(LimitExceeded):
        hub.subscribe(1, "x" * 9)
    with pytest.raises(LimitExceeded):
        hub.publish(1, "x" * 9, lazily_frame(snap(0, {})))
    assert "x" * 9 not in hub.stream_ids()
    assert hub.stats.rejected == 3


def test_an_encoder_failure_resets_only_its_view_and_others_keep_receiving() -> None:
    hub, woken = make_hub()

    def fails_on_deltas(frame: OutFrame) -> bytes:
        if frame.kind == "diff":
            raise TypeError("this view cannot encode deltas")
        return json_encoder(frame)

    hub.register_encoder("brittle", fails_on_deltas)
    hub.connect(1, LAZILY, wake=woken.append)
    hub.connect(2, LAZILY, wake=woken.append)
    hub.connect(3, ViewKey("lazily", "brittle"), wake=woken.append)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.subscribe(2, "s")
    hub.subscribe(3, "s")
    good = RefSubscriber()
    good.feed(hub.take(2))
    hub.take(3)
    woken.clear()
    hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    assert 3 in woken  # the faulted connection is woken to be reset
    with pytest.raises(InternalError):
        hub.take_bytes(3)
    for epoch in range(1, 4):
        hub.publish(1, "s", lazily_frame(cell_set(epoch, 1, bytes([epoch]))))
    good.feed(hub.take(2))
    assert (good.epoch, good.values, good.gaps) == (4, {1: b"\x03"}, 0)
    assert hub.subscribers_of("s") == [2]


def test_a_failing_snapshot_encode_faults_only_the_draining_connection() -> None:
    hub, woken = make_hub()

    def never(frame: OutFrame) -> bytes:
        raise RuntimeError("broken dialect")

    hub.register_encoder("never", never)
    hub.connect(1, LAZILY, wake=woken.append)
    hub.connect(2, ViewKey("lazily", "never"), wake=woken.append)
    hub.connect(3, LAZILY, wake=woken.append)
    hub.publish(1, "s", lazily_frame(snap(0, {1: b"a"})))
    hub.subscribe(2, "s")
    hub.subscribe(3, "s")
    with pytest.raises(InternalError) as err:
        hub.take_bytes(2)
    assert "broken dialect" in err.value.message
    data, frames = hub.take_bytes(3)
    assert frames == 1
    assert b'"epoch":0' in data


class Recorder:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.prepared: list[Frame[object]] = []
        self.committed: list[Frame[object]] = []

    def prepare(self, stream: object, conn: int, frame: Frame[object]) -> Callable[[], None]:
        if self.refuse:
            raise InvalidRecord("cannot store it", path="payload")
        self.prepared.append(frame)
        return partial(self.commit, frame)

    def commit(self, prepared: Frame[object]) -> None:
        self.committed.append(prepared)


def test_a_frame_the_recorder_cannot_store_is_refused_and_changes_nothing() -> None:
    recorder = Recorder()
    hub, woken = make_hub(recorder)
    hub.connect(1, LAZILY, wake=woken.append)
    first = lazily_frame(snap(0, {1: b"a"}))
    hub.publish(1, "s", first)
    recorder.refuse = True
    with pytest.raises(LimitExceeded) as err:
        hub.publish(1, "s", lazily_frame(cell_set(0, 1, b"b")))
    assert err.value.path == "payload"
    assert hub.epoch_of("s") == 0
    recorder.refuse = False
    bad = lazily_frame(cell_set(0, 99, b"b"))
    with pytest.raises(RemoteProtocolError):
        hub.publish(1, "s", bad)
    assert recorder.committed == [first]  # prepared for the bad frame, never committed


def test_node_remove_takes_its_edges_and_a_rejected_delta_changes_nothing() -> None:
    hub, woken = make_hub()
    hub.connect(1, LAZILY, wake=woken.append)
    hub.publish(1, "s", lazily_frame(snap(0, {i: b"v" for i in range(40)})))
    from octosync.ipc.messages import EdgeAdd

    edges = tuple(EdgeAdd(a, b) for a in range(40) for b in range(40) if a != b)
    hub.publish(1, "s", lazily_frame(Delta(0, 1, edges)))
    removes = tuple(NodeRemove(i) for i in range(0, 40, 2))
    hub.publish(1, "s", lazily_frame(Delta(1, 2, removes)))
    latest = hub.latest_snapshot("s")
    assert latest is not None
    left = {n.slot_id for n in latest.nodes}
    assert left == set(range(1, 40, 2))
    assert {(e.dependent, e.dependency) for e in latest.edges} == {
        (a, b) for a in left for b in left if a != b
    }
    again = Delta(2, 3, (NodeAdd(1, "bytes", b"dup"),))
    with pytest.raises(RemoteProtocolError) as err:
        hub.publish(1, "s", lazily_frame(again))
    assert err.value.path == "ops[0]"
    unresolved = Delta(2, 3, (NodeAdd(100, "bytes", None, state="resolved"),))
    with pytest.raises(RemoteProtocolError):
        hub.publish(1, "s", lazily_frame(unresolved))
    assert hub.latest_snapshot("s") == latest
