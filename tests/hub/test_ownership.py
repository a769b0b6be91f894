"""WVP ownership in the hub: a lease that lapses, a hand-over, and resync requests forwarded
to the producer at most once per interval (sans-I/O, injected clock)."""

from __future__ import annotations

import pytest

from octosync.errors import Forbidden, ForbiddenPublish, SnapshotRequired
from octosync.hub import DiffFrame, Hub, HubConfig, OutFrame, SnapshotFrame, ViewKey

WVP = ViewKey("wvp", "wvp/ws")
W = "warp:1"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def encoder(frame: OutFrame) -> bytes:
    return f"{frame.kind}:{frame.epoch}:{frame.body}".encode()


def make(**config: object) -> tuple[Hub, Clock]:
    clock = Clock()
    hub = Hub(HubConfig(**config), clock=clock, encoders={"wvp/ws": encoder})  # type: ignore[arg-type]
    for conn in (1, 2, 3):
        hub.connect(conn, WVP, wake=lambda _c: None)
    return hub, clock


def test_a_producer_holds_its_warp_until_its_lease_lapses() -> None:
    hub, clock = make(producer_lease=10.0)
    hub.publish(1, W, SnapshotFrame(0, "g0"))
    clock.now = 9.0
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, W, SnapshotFrame(5, "g5"))
    hub.publish(1, W, DiffFrame(0, 1, "d1"))  # publishing renews the lease
    clock.now = 18.0
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, W, SnapshotFrame(5, "g5"))
    clock.now = 19.0
    with pytest.raises(SnapshotRequired):
        hub.publish(2, W, DiffFrame(1, 2, "d2"))
    hub.publish(2, W, SnapshotFrame(5, "g5"))
    assert hub.producer_of(W) == 2
    with pytest.raises(ForbiddenPublish):
        hub.publish(1, W, DiffFrame(5, 6, "late"))


def test_without_a_lease_ownership_never_lapses() -> None:
    hub, clock = make()
    hub.publish(1, W, SnapshotFrame(0, "g0"))
    clock.now = 1e9
    with pytest.raises(ForbiddenPublish):
        hub.publish(2, W, SnapshotFrame(1, "g1"))


def test_hand_over_moves_the_warp_and_the_new_producer_starts_with_a_snapshot() -> None:
    hub, _ = make()
    hub.publish(1, W, SnapshotFrame(0, "g0"))
    with pytest.raises(ForbiddenPublish):
        hub.hand_over(2, W, 3)  # only the producer hands over
    with pytest.raises(Forbidden):
        hub.hand_over(1, W, 99)  # to a connection that exists
    hub.hand_over(1, W, 2)
    assert hub.producer_of(W) == 2
    with pytest.raises(ForbiddenPublish):
        hub.publish(1, W, DiffFrame(0, 1, "d"))
    with pytest.raises(SnapshotRequired):
        hub.publish(2, W, DiffFrame(0, 1, "d"))
    hub.publish(2, W, SnapshotFrame(3, "g3"))
    hub.disconnect(1)
    assert hub.producer_of(W) == 2  # the old producer leaving releases nothing


def test_resync_requests_reach_the_producer_once_per_interval_or_until_it_snapshots() -> None:
    hub, clock = make(resync_interval=5.0)
    hub.publish(1, W, SnapshotFrame(0, "g0"))
    with pytest.raises(Forbidden):
        hub.request_resync(2, W, "ask")  # not subscribed
    hub.subscribe(2, W)
    hub.subscribe(3, W)
    hub.take(2)
    hub.take(3)
    assert hub.request_resync(2, W, "ask") == 1
    assert hub.take(1) == [b"resync:0:ask"]
    assert hub.request_resync(3, W, "ask") is None  # already asked
    assert hub.take(1) == []
    clock.now = 5.0
    assert hub.request_resync(3, W, "ask") == 1
    hub.publish(1, W, SnapshotFrame(4, "g4"))  # the answer clears the pending request
    assert hub.request_resync(2, W, "ask") == 1


def test_with_no_producer_the_requester_gets_the_hubs_replay() -> None:
    hub, _ = make()
    hub.publish(1, W, SnapshotFrame(0, "g0"))
    hub.publish(1, W, DiffFrame(0, 1, "d1"))
    hub.disconnect(1)
    hub.subscribe(2, W)
    assert hub.take(2) == [b"snapshot:0:g0", b"diff:1:d1"]
    assert hub.request_resync(2, W, "ask") is None
    assert hub.take(2) == [b"snapshot:0:g0", b"diff:1:d1"]
