"""The hub checks WVP state hashes against its own render graph (``verify_warp_hashes``)."""

from __future__ import annotations

import pytest

from octosync.errors import Desync, EpochGap
from octosync.hub import DiffFrame, Hub, HubConfig, OutFrame, SnapshotFrame, ViewKey
from octosync.warp import graph as g
from octosync.warp.consumer import WarpProducer
from octosync.wire import wvp

WVP = ViewKey("wvp", "wvp/ws")
W = "warp:3"


def encoder(frame: OutFrame) -> bytes:
    return f"{frame.kind}:{frame.epoch}".encode()


def make(verify: bool = True) -> Hub:
    hub = Hub(HubConfig(verify_warp_hashes=verify), clock=lambda: 0.0, encoders={"wvp/ws": encoder})
    for conn in (1, 2):
        hub.connect(conn, WVP, wake=lambda _c: None)
    hub.subscribe(2, W)
    return hub


def snap(f: wvp.WarpSnapshot) -> SnapshotFrame[object]:
    return SnapshotFrame(f.epoch, f, f.state_hash)


def diff(f: wvp.WarpDiff) -> DiffFrame[object]:
    return DiffFrame(f.from_epoch, f.to_epoch, f, f.state_hash)


def lie(f: wvp.WarpDiff) -> wvp.WarpDiff:
    return wvp.WarpDiff(f.from_epoch, f.to_epoch, f.ops, bytes(32))


def test_a_wrong_hash_is_refused_and_changes_nothing() -> None:
    hub = make()
    producer = WarpProducer()
    hub.publish(1, W, snap(producer.snapshot()))
    hub.publish(1, W, diff(producer.diff([g.add_node(1)])))
    bad = producer.diff([g.add_node(2)])
    with pytest.raises(Desync) as info:
        hub.publish(1, W, diff(lie(bad)))
    assert info.value.path == "state_hash"
    assert hub.epoch_of(W) == 1
    hub.publish(1, W, diff(bad))  # the honest frame of the same epoch still lands
    assert hub.epoch_of(W) == 2
    assert hub.take(2) == [b"snapshot:0", b"diff:1", b"diff:2"]


def test_ops_that_do_not_fit_and_a_gap_keep_their_own_errors() -> None:
    hub = make()
    producer = WarpProducer()
    hub.publish(1, W, snap(producer.snapshot()))
    with pytest.raises(Desync):
        hub.publish(1, W, diff(wvp.WarpDiff(0, 1, [g.remove_node(9)], None)))
    with pytest.raises(EpochGap):
        hub.publish(1, W, diff(wvp.WarpDiff(5, 6, [], None)))


def test_a_hash_over_a_graph_that_is_not_the_reference_graph_is_refused() -> None:
    hub = make()
    hub.publish(1, W, SnapshotFrame(0, wvp.WarpSnapshot(0, {"mine": 1})))  # no hash: relayed
    with pytest.raises(Desync):
        hub.publish(1, W, DiffFrame(0, 1, wvp.WarpDiff(0, 1, [1], b"h" * 32), b"h" * 32))
    hub.publish(1, W, DiffFrame(0, 1, wvp.WarpDiff(0, 1, [1])))


def test_without_the_setting_hashes_are_relayed_unchecked() -> None:
    hub = make(verify=False)
    producer = WarpProducer()
    hub.publish(1, W, snap(producer.snapshot()))
    hub.publish(1, W, diff(lie(producer.diff([g.add_node(1)]))))
    assert hub.epoch_of(W) == 1
