from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from octosync.errors import DuplicatePeer, Forbidden, NotJoined, UnknownTarget
from octosync.signaling.messages import (
    ClientSignal,
    Join,
    Leave,
    Offer,
    OfferFrom,
    PeerJoined,
    PeerLeft,
    Relay,
    RelayFrom,
    ServerSignal,
    Welcome,
)
from octosync.signaling.rooms import (
    SignalingHub,
    SignalingPolicy,
)

client_dec = msgspec.json.Decoder(ClientSignal)
server_dec = msgspec.json.Decoder(ServerSignal)


def test_fixture_frames_roundtrip(vectors_dir: Path) -> None:
    doc = json.loads((vectors_dir / "lazily/signaling/frames.json").read_text())
    for frame in doc["frames"]:
        raw = json.dumps(frame["wire"]).encode()
        dec = client_dec if frame["direction"] == "client" else server_dec
        msg = dec.decode(raw)
        assert json.loads(msgspec.json.encode(msg)) == frame["wire"], frame["label"]
    for reject in doc["rejects"][:2]:
        with pytest.raises(msgspec.ValidationError):
            client_dec.decode(json.dumps(reject["wire"]).encode())


def test_join_welcome_roster_and_peer_joined() -> None:
    hub = SignalingHub()
    assert hub.handle(10, "room", Join(peer=1)) == [(10, Welcome(peer=1, peers=()))]
    out = hub.handle(20, "room", Join(peer=2))
    assert out == [(20, Welcome(peer=2, peers=(1,))), (10, PeerJoined(peer=2))]
    assert hub.roster("room") == [1, 2]
    assert hub.handle(30, "other", Join(peer=1)) == [(30, Welcome(peer=1, peers=()))]


def test_from_is_always_the_registered_peer() -> None:
    hub = SignalingHub()
    hub.handle(10, "r", Join(peer=1))
    hub.handle(20, "r", Join(peer=2))
    out = hub.handle(10, "r", Offer(to=2, sdp="v=0"))
    assert out == [(20, OfferFrom(from_=1, sdp="v=0"))]
    out = hub.handle(20, "r", Relay(to=1, payload={"from": 99}))
    assert out == [(10, RelayFrom(from_=2, payload={"from": 99}))]


def test_nothing_before_join_duplicate_join_and_unknown_target() -> None:
    hub = SignalingHub()
    with pytest.raises(NotJoined):
        hub.handle(10, "r", Offer(to=2, sdp="x"))
    hub.handle(10, "r", Join(peer=1))
    with pytest.raises(DuplicatePeer):
        hub.handle(20, "r", Join(peer=1))
    with pytest.raises(DuplicatePeer):
        hub.handle(10, "r", Join(peer=5))
    with pytest.raises(UnknownTarget):
        hub.handle(10, "r", Offer(to=2, sdp="x"))
    assert hub.roster("r") == [1]
    assert hub.peer_of(20) is None


def test_leave_and_disconnect_announce_peer_left() -> None:
    hub = SignalingHub()
    hub.handle(10, "r", Join(peer=1))
    hub.handle(20, "r", Join(peer=2))
    assert hub.handle(20, "r", Leave()) == [(10, PeerLeft(peer=2))]
    assert hub.leave(20) == []
    assert hub.leave(10) == []
    assert hub.roster("r") == []


def test_allowlist_is_default_deny() -> None:
    hub = SignalingHub(SignalingPolicy("allowlist", {1: {2}, 2: set()}))
    hub.handle(10, "r", Join(peer=1))
    hub.handle(20, "r", Join(peer=2))
    with pytest.raises(Forbidden):
        hub.handle(30, "r", Join(peer=3))
    assert hub.handle(10, "r", Offer(to=2, sdp="x")) == [(20, OfferFrom(from_=1, sdp="x"))]
    with pytest.raises(Forbidden):
        hub.handle(20, "r", Offer(to=1, sdp="x"))


class Rights:
    def __init__(self, rooms: set[str], peer: int | None) -> None:
        self.rooms = rooms
        self.peer = peer
        self.everything = False

    def may_join(self, room: str) -> bool:
        return room in self.rooms


def test_joining_needs_the_room_grant() -> None:
    hub = SignalingHub()
    with pytest.raises(Forbidden) as err:
        hub.handle(10, "r", Join(peer=1), Rights(rooms={"other"}, peer=None))
    assert err.value.path == "session"
    assert hub.roster("r") == []
    hub.handle(10, "r", Join(peer=1), Rights(rooms={"r"}, peer=None))
    assert hub.roster("r") == [1]


def test_allowlist_binds_the_peer_id_to_the_credentials() -> None:
    hub = SignalingHub(SignalingPolicy("allowlist", {1: {2}, 2: {1}}))
    eve = Rights(rooms={"r"}, peer=2)
    with pytest.raises(Forbidden) as err:
        hub.handle(10, "r", Join(peer=1), eve)  # 1 is allowlisted, but eve is peer 2
    assert err.value.path == "peer"
    unbound = Rights(rooms={"r"}, peer=None)
    with pytest.raises(Forbidden):
        hub.handle(11, "r", Join(peer=1), unbound)
    hub.handle(12, "r", Join(peer=2), eve)
    assert hub.roster("r") == [2]
