"""The dataspace face's session fed bytes with no socket: lifecycle, framing, errors, close."""

from __future__ import annotations

import pytest
from preserves import Embedded, Record, Symbol

from octosync.errors import DecodeError, Unauthorized, UnknownOid
from octosync.hub.policy import closes_connection
from octosync.server.auth import ANONYMOUS_DEV, AuthConfig
from octosync.server.config import ServerConfig
from octosync.server.dataspace_session import DataspaceSession, State
from octosync.server.dataspace_state import dataspace_state
from octosync.server.runtime import Runtime
from octosync.syndicate.sturdy import mint
from octosync.wire.syndicate import (
    Assert,
    Error,
    Mine,
    PacketStream,
    Turn,
    TurnEvent,
    decode_packet,
    encode_packet,
)
from tests.server.test_sessions import feed, unframe

SECRET = b"session-test-secret-0123456789ab"


def runtime(**overrides: object) -> Runtime:
    config = ServerConfig(insecure_dev=True, dataspace_secret=SECRET, **overrides)  # type: ignore[arg-type]
    return Runtime(config.with_auth_mode())


def resolve(secret: bytes = SECRET, handle: int = 1) -> bytes:
    ask = Record(Symbol("resolve"), [mint(secret, "demo"), Embedded(Mine(0))])
    return encode_packet(Turn((TurnEvent(0, Assert(ask, handle)),)))


def test_a_websocket_session_is_ready_once_a_ref_resolves() -> None:
    rt = runtime()
    s = DataspaceSession(dataspace_state(rt), 1, "ws", ANONYMOUS_DEV)
    assert not s.ready
    assert feed(s, resolve(b"x" * 32)) is None
    assert s.life.state is State.AWAIT_RESOLVE
    [rejected] = unframe(s.outgoing.pop())
    answer = decode_packet(rejected)
    assert isinstance(answer, Turn)
    assert answer.events[0].event.assertion.key == Symbol("rejected")  # type: ignore[union-attr]
    s.outgoing.clear()
    assert feed(s, resolve(handle=2)) is None
    assert s.ready
    assert s.life.state is State.RESOLVED


def test_errors_are_error_packets_and_always_close() -> None:
    rt = runtime()
    s = DataspaceSession(dataspace_state(rt), 1, "ws", ANONYMOUS_DEV)
    assert feed(s, b"\xff") == "DecodeError"
    [frame] = unframe(s.outgoing.pop())
    packet = decode_packet(frame)
    assert isinstance(packet, Error)
    assert packet.detail.fields[0] == "DecodeError"
    assert closes_connection(DecodeError("x"), byte_stream=s.byte_stream)
    assert closes_connection(UnknownOid("x"), byte_stream=s.byte_stream)


def test_tcp_frames_are_raw_packets_and_need_credentials_when_auth_is_configured() -> None:
    rt = Runtime(
        ServerConfig(
            auth=AuthConfig(hs256_secret="k" * 32), dataspace_secret=SECRET
        ).with_auth_mode()
    )
    s = DataspaceSession(dataspace_state(rt), 1, "tcp", None)
    frame = PacketStream(1 << 20).feed(resolve())[0]
    with pytest.raises(Unauthorized):
        s.handle(s.decode(frame))
    s.send_error(Unauthorized("no"))
    assert isinstance(decode_packet(s.outgoing.pop()), Error)  # no WebSocket framing


def test_close_retracts_and_leaves_the_relay() -> None:
    rt = runtime()
    s = DataspaceSession(dataspace_state(rt), 1, "ws", ANONYMOUS_DEV)
    feed(s, resolve())
    ds = dataspace_state(rt).relay.dataspace("demo")
    assert feed(s, encode_packet(Turn((TurnEvent(1, Assert("here", 5)),)))) is None
    assert ds.space.count("here") == 1
    s.close()
    assert ds.space.count("here") == 0
    assert 1 not in dataspace_state(rt).relay.conns
    assert 1 not in dataspace_state(rt).relay_framing
    assert s.life.state is State.CLOSED
