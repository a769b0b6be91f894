"""The per-face protocol objects, fed bytes with no socket: bytes and hub state come out."""

from __future__ import annotations

import json

import msgspec
import pytest

from octosync.errors import LocalProtocolError, OctosyncError
from octosync.server.auth import ANONYMOUS_DEV
from octosync.server.config import ServerConfig
from octosync.server.dataspace_session import DataspaceSession
from octosync.server.lazily_session import LazilySession, State
from octosync.server.lazily_state import lazily_state
from octosync.server.runtime import Runtime
from octosync.server.signal_session import SignalSession
from octosync.server.signal_state import signal_state
from octosync.server.wvp_session import WvpSession
from octosync.wire import cbor, jsabi, wvp
from octosync.wire.websocket import ws_frame
from tests.e2e.helpers import delta, handshake, snap


def feed(
    session: LazilySession | WvpSession | SignalSession | DataspaceSession, data: bytes
) -> str | None:
    """What the connection loop does with one frame: the error's name, or None."""
    try:
        session.handle(session.decode(data))
    except OctosyncError as err:
        session.send_error(err)
        return err.name
    return None


def runtime(**overrides: object) -> Runtime:
    return Runtime(ServerConfig(insecure_dev=True, **overrides).with_auth_mode())  # type: ignore[arg-type]


def unframe(data: bytes) -> list[bytes]:
    """Split server-to-client WebSocket frames (unmasked, as ``ws_frame`` writes them)."""
    out = []
    while data:
        n = data[1] & 0x7F
        at = 2
        if n == 126:
            n, at = int.from_bytes(data[2:4], "big"), 4
        elif n == 127:
            n, at = int.from_bytes(data[2:10], "big"), 10
        out.append(data[at : at + n])
        data = data[at + n :]
    return out


async def test_lazily_roles_follow_the_state_table() -> None:
    rt = runtime()
    producer = LazilySession(lazily_state(rt), 1, "ws", ANONYMOUS_DEV)
    assert not producer.ready
    assert feed(producer, b"not a handshake") == "HandshakeFailed"
    assert json.loads(unframe(producer.outgoing.pop())[0])["code"] == "HandshakeFailed"
    assert feed(producer, handshake("s", publish=True)) is None
    assert producer.life.state is State.PRODUCING
    assert feed(producer, snap(0, {1: b"a"})) is None
    assert feed(producer, json.dumps({"type": "resync_request"}).encode()) == "Forbidden"
    reply, error = unframe(rt.hub.take_bytes(1)[0])
    assert json.loads(reply)["session_id"] == "s"
    assert json.loads(error)["code"] == "Forbidden"

    viewer = LazilySession(lazily_state(rt), 2, "ws", ANONYMOUS_DEV)
    assert feed(viewer, handshake("s")) is None
    assert viewer.life.state is State.SUBSCRIBED
    assert feed(viewer, snap(5, {})) == "ForbiddenPublish"
    assert feed(viewer, delta(0, 1, b"w")) is None  # a cell_set write goes to the producer
    frames = [json.loads(f) for f in unframe(rt.hub.take_bytes(2)[0])]
    assert [f.get("type", "handshake") for f in frames] == [
        "handshake",
        "error",
        "snapshot",
    ]  # control first
    (write,) = unframe(rt.hub.take_bytes(1)[0])
    assert json.loads(write)["ops"][0]["payload"] == "dw=="
    viewer.close()
    with pytest.raises(LocalProtocolError):
        viewer.life.move("handshake_publish")


async def test_lazily_tcp_frames_with_a_u32_prefix_and_names_no_reserved_stream() -> None:
    rt = runtime()
    tcp = LazilySession(lazily_state(rt), 3, "tcp", None)
    assert feed(tcp, handshake("warp:1")) == "HandshakeFailed"
    raw = tcp.outgoing.pop()
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    assert json.loads(raw[4:])["code"] == "HandshakeFailed"
    assert not tcp.ready


async def test_wvp_handshake_then_stream_frames_with_graphs_kept_raw() -> None:
    rt = runtime()
    session = WvpSession(rt, 1, ANONYMOUS_DEV)
    hello = jsabi.encode_packet(
        cbor.encode(
            {"op": "handshake", "ts": 1, "payload": {"capabilities": [], "client_version": 1}}
        )
    )
    assert feed(session, hello) is None
    assert session.ready
    graph = {"nodes": [1, 2, 3]}
    snapshot = wvp.encode(wvp.WarpStream(7, wvp.WarpSnapshot(0, graph)), 2)
    decoded = session.decode(snapshot)
    assert isinstance(decoded, wvp.WarpStream)
    assert isinstance(decoded.frame.graph, cbor.Raw)
    session.handle(decoded)
    viewer = WvpSession(rt, 2, ANONYMOUS_DEV)
    feed(viewer, hello)
    feed(viewer, wvp.encode(wvp.SubscribeWarp(7), 3))
    _ack, replay = unframe(rt.hub.take_bytes(2)[0])
    assert wvp.decode(replay)[0] == wvp.WarpStream(7, wvp.WarpSnapshot(0, graph))
    assert feed(session, wvp.encode(wvp.HandshakeAck("OK", 1, (), "x"), 4)) == "DecodeError"


async def test_signal_replies_to_itself_and_relays_through_the_runtime() -> None:
    rt = runtime()
    alone = SignalSession(signal_state(rt), 1, ANONYMOUS_DEV, "room")
    assert feed(alone, b'{"type":"offer","to":2,"sdp":"x"}') == "NotJoined"
    assert json.loads(unframe(alone.outgoing.pop())[0])["code"] == "not_joined"
    assert feed(alone, msgspec.json.encode({"type": "join", "peer": 1})) is None
    assert json.loads(unframe(alone.outgoing.pop())[0]) == {
        "type": "welcome",
        "peer": 1,
        "peers": [],
    }
    assert feed(alone, b'{"type":"\xff"}') == "DecodeError"


def test_unframe_reads_every_length_form() -> None:
    for size in (5, 300, 70_000):
        assert unframe(ws_frame(b"x" * size, text=False) + ws_frame(b"y", text=True)) == [
            b"x" * size,
            b"y",
        ]
