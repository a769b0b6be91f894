"""Sessions fed bytes through fake ports: what a face may call is all a session needs.

The fakes hold the real sans-I/O cores (``TopGunCore``, ``SignalingHub``); only the ways out
(deliver, the journal's commit) are recorded, so a test decides when a commit completes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from octosync.cluster.holding import Holdings
from octosync.cluster.map_interest import MapGate, maps_named
from octosync.errors import Overloaded
from octosync.refresh.device_tokens import Binding
from octosync.server.auth import ANONYMOUS_DEV, ClaimGrants
from octosync.server.connection import _messages
from octosync.server.ports import MapHolder, Replicator, SignalPort, TopGunPort
from octosync.server.signal_session import SignalSession
from octosync.server.topgun_session import TopGunSession
from octosync.server.topgun_wire import encode
from octosync.signaling import SignalingHub
from octosync.store.commit_path import WRITE, Ask, Commit, refuse
from octosync.store.storage_rules import JournalWritable, QueueRoom
from octosync.topgun import Effects, Outbound, TopGunCore
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv
from octosync.wire.websocket import ws_frame
from tests.topgun.helpers import Clock, batch, put


def unframe(data: bytes) -> list[bytes]:
    """The payloads of a run of unmasked server WebSocket frames."""
    out = []
    while data:
        n = data[1] & 0x7F
        start = 2 if n < 126 else 4 if n == 126 else 10
        if n >= 126:
            n = int.from_bytes(data[2:start], "big")
        out.append(data[start : start + n])
        data = data[start + n :]
    return out


class Gate:
    def __init__(self) -> None:
        self.room = True

    def check_writable(self) -> None:
        pass

    def has_room(self) -> bool:
        return self.room


class FakeCommits:
    """The commit path with the real storage rules over ``Gate``; submissions recorded, and
    a test runs a commit's after-commit effects (``then``) when it decides it committed."""

    journaled = True

    def __init__(self, gate: Gate) -> None:
        self.rules = (JournalWritable(gate), QueueRoom(gate))
        self.submitted: list[tuple[int, int, Callable[[], None]]] = []

    def refuse(self, ask: Ask = WRITE) -> None:
        refuse(self.rules, ask)

    def submit(self, commit: Commit) -> None:
        def then() -> None:
            for effect in commit.after:
                effect()

        self.submitted.append((commit.conn, len(commit.records), then))


class FakeTopGun:
    """``TopGunPort`` with the real core; deliveries and commits recorded."""

    def __init__(self) -> None:
        self.topgun = TopGunCore(Clock(), persistent=True)
        self.gate = Gate()
        self.replicator: Replicator | None = None
        self.map_holder: MapHolder | None = None
        self.insecure_dev = True
        self.max_frame = 1 << 20
        self.delivered: list[tuple[int, bytes]] = []
        self.commits = FakeCommits(self.gate)
        self.flushes = 0
        self.binds: list[tuple[str | None, str | None, Callable[[Binding | None], None]]] = []
        self.bind_at_once = True
        """Bindings answer during the call (else a test answers ``binds`` itself)."""

    def bind_device(
        self, subject: str | None, presented: str | None, then: Callable[[Binding | None], None]
    ) -> None:
        if self.bind_at_once:
            then(Binding(f"device-of-{subject}", "minted"))
        else:
            self.binds.append((subject, presented, then))

    def authenticate(self, token: str | None) -> ClaimGrants:
        return ANONYMOUS_DEV

    def deliver(self, conn: int, *data: bytes) -> None:
        self.delivered.append((conn, b"".join(data)))

    def deliver_all(self, out: Sequence[Outbound]) -> None:
        for ob in out:
            for target in ob.targets:
                self.deliver(target, ws_frame(encode(ob.message), text=False))

    def flush_soon(self) -> None:
        self.flushes += 1

    def publish_map_frames(self, frames: object) -> None:
        pass

    def apply(self, fx: Effects) -> None:
        self.deliver_all(fx.out)


def feed(session: TopGunSession, message: tg.Message) -> list[tg.Message]:
    """Bytes in, as the connection loop does; what the session queued for its peer, decoded."""
    session.handle(session.decode(tg.encode(message)))
    out = [tg.decode(p) for data in session.outgoing for p in unframe(data)]
    session.outgoing.clear()
    return out


def test_a_persisted_ack_and_the_replies_behind_it_wait_for_the_commit() -> None:
    port = FakeTopGun()
    typed: TopGunPort = port
    session = TopGunSession(typed, 7)
    assert session.outgoing == []  # insecure dev: no AUTH_REQUIRED greeting
    (ack,) = feed(session, tg.DeviceHello())
    assert isinstance(ack, tg.DeviceAck)
    assert session.ready
    assert feed(session, batch(put("1", "k", "v", 10), write_concern="PERSISTED")) == []
    assert feed(session, tg.Ping(timestamp=5)) == []  # in order: behind the pending ack
    ((conn, records, then),) = port.commits.submitted
    assert (conn, records) == (7, 1)
    assert port.delivered == []
    then()  # the journal committed
    ((to, data),) = port.delivered
    op_ack, pong = (tg.decode(p) for p in unframe(data))
    assert to == 7
    assert isinstance(op_ack, tg.OpAck)
    assert op_ack.payload.achieved_level == "PERSISTED"
    assert isinstance(pong, tg.Pong)
    assert pong.timestamp == 5


def test_a_batchs_inner_messages_keep_their_order_behind_a_pending_ack_and_each_is_charged() -> (
    None
):
    port = FakeTopGun()
    session = TopGunSession(port, 7)
    feed(session, tg.DeviceHello())
    assert session.messages_in_frame == 1
    durable = tg.encode(batch(put("1", "k", "v", 10), write_concern="PERSISTED"))
    packed = tg.pack_batch([durable, tg.encode(tg.Ping(timestamp=5))])
    assert feed(session, packed) == []  # the PONG waits behind the durable ack
    assert session.messages_in_frame == 2
    assert _messages(session) == 2  # the connection charges two frames to its budget
    ((_conn, _records, then),) = port.commits.submitted
    then()
    ((_to, data),) = port.delivered
    op_ack, pong = (tg.decode(p) for p in unframe(data))
    assert isinstance(op_ack, tg.OpAck)
    assert isinstance(pong, tg.Pong)
    feed(session, tg.Ping(timestamp=6))
    assert _messages(session) == 1


def test_a_write_is_refused_while_the_journal_has_no_room() -> None:
    port = FakeTopGun()
    session = TopGunSession(port, 1)
    feed(session, tg.DeviceHello())
    port.gate.room = False
    with pytest.raises(Overloaded):
        feed(session, batch(put("1", "k", "v", 10), write_concern="APPLIED"))
    assert port.commits.submitted == []
    assert port.topgun.maps.live_items("users") == {}


def test_before_auth_every_message_but_ping_is_dropped_unread() -> None:
    """As TopGun's server does: its cluster client's pooled connections send a
    ``PARTITION_MAP_REQUEST`` and ops as soon as the socket opens, and resend them."""
    port = FakeTopGun()
    port.insecure_dev = False
    session = TopGunSession(port, 3)
    session.outgoing.clear()  # AUTH_REQUIRED
    assert feed(session, sv.PartitionMapRequest()) == []
    assert feed(session, batch(put("1", "k", "v", 10))) == []
    (pong,) = feed(session, tg.Ping(timestamp=4))
    assert isinstance(pong, tg.Pong)
    assert not session.ready
    assert port.topgun.maps.live_items("users") == {}
    (ack,) = feed(session, tg.Auth(token="any"))
    assert isinstance(ack, tg.AuthAck)


def test_replies_wait_behind_the_auth_ack_until_the_device_is_bound() -> None:
    port = FakeTopGun()
    port.insecure_dev = False
    port.bind_at_once = False
    session = TopGunSession(port, 5)
    session.outgoing.clear()  # AUTH_REQUIRED
    assert feed(session, tg.Auth(token="any", device_token="kept")) == []
    assert session.ready
    assert feed(session, tg.Ping(timestamp=9)) == []  # behind the ack
    ((subject, presented, then),) = port.binds
    assert (subject, presented) == (None, "kept")  # the fake's identity is anonymous
    then(Binding("d-1"))
    ((to, data),) = port.delivered
    ack, pong = (tg.decode(p) for p in unframe(data))
    assert to == 5
    assert isinstance(ack, tg.AuthAck)
    assert (ack.device_id, ack.device_token) == ("d-1", None)
    assert isinstance(pong, tg.Pong)


def test_a_failed_binding_still_acks_without_a_device_id() -> None:
    port = FakeTopGun()
    port.bind_at_once = False
    session = TopGunSession(port, 6)
    assert feed(session, tg.DeviceHello(device_token="x" * 500)) == []
    ((_, presented, then),) = port.binds
    assert presented == "x" * 500
    then(None)
    ((_, data),) = port.delivered
    (ack,) = (tg.decode(p) for p in unframe(data))
    assert ack == tg.DeviceAck()


def test_a_second_device_hello_is_dropped_once_bound() -> None:
    port = FakeTopGun()
    session = TopGunSession(port, 8)
    (ack,) = feed(session, tg.DeviceHello())
    assert ack == tg.DeviceAck(device_id="device-of-None", device_token="minted")
    assert feed(session, tg.DeviceHello(device_token="other")) == []


class FakeSignal:
    """``SignalPort`` with the real rooms; deliveries recorded."""

    def __init__(self) -> None:
        self.signaling = SignalingHub()
        self.max_frame = 1 << 16
        self.delivered: list[tuple[int, bytes]] = []

    def authenticate(self, token: str | None) -> ClaimGrants:
        return ANONYMOUS_DEV

    def deliver(self, conn: int, *data: bytes) -> None:
        self.delivered.append((conn, b"".join(data)))


def test_signal_frames_for_another_peer_go_out_through_the_port() -> None:
    port = FakeSignal()
    typed: SignalPort = port
    alice = SignalSession(typed, 1, ANONYMOUS_DEV, "room")
    bob = SignalSession(typed, 2, ANONYMOUS_DEV, "room")
    for session, peer in ((alice, 1), (bob, 2)):
        session.handle(session.decode(b'{"type": "join", "peer": %d}' % peer))
    assert port.delivered
    assert all(to == 1 for to, _ in port.delivered)
    port.delivered.clear()
    bob.handle(bob.decode(b'{"type": "offer", "to": 1, "sdp": "v=0"}'))
    ((to, data),) = port.delivered
    assert to == 1
    assert b'"from":2' in data
    assert b'"sdp":"v=0"' in data


class GateHolder:
    """``MapHolder`` over the real interest table; the test says when a load ends."""

    def __init__(self) -> None:
        self.gate: MapGate[tg.Message] = MapGate(Holdings(lambda: 0.0), maps_named)
        self.resume: dict[int, Callable[[tg.Message], None]] = {}
        self.loads: list[str] = []

    def take(self, conn: int, message: tg.Message, resume: Callable[[tg.Message], None]) -> bool:
        taken = self.gate.take(conn, message)
        self.loads.extend(load.name for load in taken.loads)
        if not taken.now:
            self.resume[conn] = resume
        return taken.now

    def closed(self, conn: int) -> None:
        self.gate.closed(conn)

    async def hold(self, conn: int, names: Sequence[str]) -> None:
        raise NotImplementedError  # HTTP sync: tests/e2e/test_cluster_held_maps.py

    def follow(self, name: str, then: Callable[[], None]) -> bool:
        raise NotImplementedError  # map: streams: tests/e2e/test_cluster_held_maps.py

    def loaded(self, name: str) -> None:
        for go in self.gate.loaded(name):
            self.resume[go.conn](go.message)


def test_messages_naming_a_map_not_held_wait_for_its_load_and_then_go_in_order() -> None:
    """Maps held by interest: a write to a map the node does not hold is not applied to the
    empty copy; it and every message behind it wait, then go in the order sent."""
    port = FakeTopGun()
    holder = GateHolder()
    typed: MapHolder = holder
    port.map_holder = typed
    session = TopGunSession(port, 4)
    feed(session, tg.DeviceHello())
    assert feed(session, batch(put("1", "k", "v", 10), write_concern="APPLIED")) == []
    assert feed(session, tg.Ping(timestamp=5)) == []  # behind the write
    assert holder.loads == ["users"]
    assert port.topgun.maps.live_items("users") == {}  # nothing applied meanwhile
    loaded = tg.client_op_to_record(put("0", "j", "old", 5))
    port.topgun.apply_remote([loaded])  # what the load folds
    holder.loaded("users")
    assert {to for to, _ in port.delivered} == {4}
    op_ack, pong = (tg.decode(p) for _, data in port.delivered for p in unframe(data))
    assert isinstance(op_ack, tg.OpAck)
    assert isinstance(pong, tg.Pong)
    assert set(port.topgun.maps.live_items("users")) == {"j", "k"}
    (pong2,) = feed(session, tg.Ping(timestamp=6))  # held now: at once
    assert isinstance(pong2, tg.Pong)
    session.close()
    assert holder.gate.uses(4) == frozenset()
