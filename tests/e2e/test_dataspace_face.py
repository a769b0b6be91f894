"""The dataspace face over real loopback sockets with raw clients: credentials, deadlines,
limits, and refused input that closes only its own connection (the interop tests use the real
syndicate-py client; these send what no well-behaved client would)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preserves import Embedded, Record, Symbol

from octosync.errors import all_errors
from octosync.server.auth import AuthConfig, issue_token
from octosync.syndicate.sturdy import mint
from octosync.wire.syndicate import (
    Assert,
    Error,
    Message,
    Mine,
    Packet,
    PacketStream,
    Retract,
    Turn,
    TurnEvent,
    decode_packet,
    encode_packet,
)
from tests.e2e.helpers import TIMEOUT, Running, serve

SECRET = b"face-test-secret-0123456789abcde"
KNOWN = {cls.name for cls in all_errors()}
LIMIT = 4096
JWT_SECRET = "jwt-secret-for-the-dataspace-face-tests"


def resolve(name: str = "demo", secret: bytes = SECRET, handle: int = 1) -> bytes:
    step = mint(secret, name)
    ask = Record(Symbol("resolve"), [step, Embedded(Mine(0))])
    return encode_packet(Turn((TurnEvent(0, Assert(ask, handle)),)))


class Raw:
    """A raw client on either transport: packets in, packets out."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse | None, tcp: Any = None) -> None:
        self.ws = ws
        self.tcp = tcp
        self.stream = PacketStream(1 << 20)
        self.pending: list[bytes] = []

    async def send(self, data: bytes) -> None:
        if self.ws is not None:
            await self.ws.send_bytes(data)
        else:
            self.tcp[1].write(data)

    async def recv(self, timeout: float = TIMEOUT) -> Packet | None:
        """The next packet; None once the server closed the connection."""
        if self.ws is not None:
            msg = await asyncio.wait_for(self.ws.receive(), timeout)
            if msg.type != aiohttp.WSMsgType.BINARY:
                return None
            return decode_packet(msg.data)
        while not self.pending:
            try:
                chunk = await asyncio.wait_for(self.tcp[0].read(65536), timeout)
            except ConnectionError:
                return None
            if not chunk:
                return None
            self.pending += self.stream.feed(chunk)
        return decode_packet(self.pending.pop(0))

    async def resolved(self) -> int:
        await self.send(resolve())
        packet = await self.recv()
        assert isinstance(packet, Turn)
        answer = packet.events[0].event
        assert isinstance(answer, Assert)
        assert answer.assertion.key == Symbol("accepted")
        ref = answer.assertion.fields[0].embeddedValue
        assert isinstance(ref, Mine)
        return ref.oid


@contextlib.asynccontextmanager
async def raw(
    srv: Running, http: aiohttp.ClientSession, kind: str, **kw: Any
) -> AsyncIterator[Raw]:
    if kind == "ws":
        ws = await http.ws_connect(f"{srv.ws_url}/dataspace", **kw)
        try:
            yield Raw(ws)
        finally:
            await ws.close()
    else:
        assert srv.dataspace_port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.dataspace_port)
        try:
            yield Raw(None, (reader, writer))
        finally:
            writer.close()


async def error_then_close(client: Raw) -> str:
    packet = await client.recv()
    assert isinstance(packet, Error), packet
    name: str = packet.detail.fields[0]
    assert await client.recv() is None
    return name


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[Running]:
    async with serve(
        tmp_path, dataspace_port=0, dataspace_secret=SECRET, max_frame_size=LIMIT
    ) as running:
        yield running


@pytest.mark.parametrize("kind", ["ws", "tcp"])
async def test_a_bad_turn_closes_only_its_connection_and_changes_nothing(
    srv: Running, kind: str
) -> None:
    async with aiohttp.ClientSession() as http, raw(srv, http, "ws") as good:
        ds = await good.resolved()
        catch_all = Record(
            Symbol("group"),
            [
                Record(Symbol("rec"), [Symbol("Present")]),
                {0: Record(Symbol("bind"), [Record(Symbol("_"), [])])},
            ],
        )
        observe = Record(Symbol("Observe"), [catch_all, Embedded(Mine(5))])
        await good.send(encode_packet(Turn((TurnEvent(ds, Assert(observe, 2)),))))
        async with raw(srv, http, kind) as bad:
            bad_ds = await bad.resolved()
            turn = Turn(
                (
                    TurnEvent(bad_ds, Assert(Record(Symbol("Present"), ["ghost"]), 2)),
                    TurnEvent(bad_ds, Retract(99)),
                )
            )
            await bad.send(encode_packet(turn))
            assert await error_then_close(bad) == "UnknownHandle"
        # good is still served, and never heard of the ghost
        await good.send(
            encode_packet(Turn((TurnEvent(ds, Assert(Record(Symbol("Present"), ["me"]), 3)),)))
        )
        packet = await good.recv()
        assert isinstance(packet, Turn)
        assert [e.event.assertion for e in packet.events] == [("me",)]  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["ws", "tcp"])
async def test_garbage_and_oversize_get_an_error_packet_and_a_close(
    srv: Running, kind: str
) -> None:
    async with aiohttp.ClientSession() as http:
        async with raw(srv, http, kind) as c:
            await c.send(b"\xff\x00garbage")
            assert await error_then_close(c) == "DecodeError"
        async with raw(srv, http, kind) as c:
            await c.resolved()
            big = encode_packet(Turn((TurnEvent(1, Message("x" * (2 * LIMIT))),)))
            await c.send(big)
            assert await error_then_close(c) == "Oversize"


async def test_tcp_needs_insecure_dev_when_jwt_auth_is_configured(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=JWT_SECRET)
    async with (
        serve(
            tmp_path, insecure_dev=False, auth=auth, dataspace_port=0, dataspace_secret=SECRET
        ) as srv,
        aiohttp.ClientSession() as http,
        raw(srv, http, "tcp") as c,
    ):
        await c.send(resolve())
        assert await error_then_close(c) == "Unauthorized"


async def test_a_token_must_grant_the_dataspace(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=JWT_SECRET)
    token = issue_token(JWT_SECRET, "alice", {"dataspace:demo": ["publish"]})
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth, dataspace_secret=SECRET) as srv,
        aiohttp.ClientSession() as http,
        raw(srv, http, "ws", headers=headers) as c,
    ):
        await c.resolved()
        await c.send(resolve("elsewhere", handle=2))
        packet = await c.recv()
        assert isinstance(packet, Turn)
        answer = packet.events[0].event
        assert isinstance(answer, Assert)
        assert answer.assertion == Record(
            Symbol("rejected"), ["the credentials do not grant dataspace 'elsewhere'"]
        )


async def test_no_resolve_within_the_handshake_deadline_closes(tmp_path: Path) -> None:
    async with (
        serve(tmp_path, dataspace_port=0, dataspace_secret=SECRET, handshake_timeout=0.2) as srv,
        aiohttp.ClientSession() as http,
        raw(srv, http, "tcp") as c,
    ):
        await c.send(resolve(secret=b"wrong-secret-0123456789abcdefghi"))
        packet = await c.recv()  # rejected: the connection is still not ready
        assert isinstance(packet, Turn)
        assert await error_then_close(c) == "HandshakeFailed"


garbage = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([1, 100, 10_000]).map(lambda d: b"\xb5" * d + b"\x84" * d),
    st.just(encode_packet(Turn((TurnEvent(7, Message(1)),)))),
    st.just(b"\xb4\xb3\x01A\x84"),
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frames=st.lists(garbage, min_size=1, max_size=6))
def test_fuzzed_frames_get_typed_errors_and_the_face_keeps_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]
) -> None:
    async def main() -> None:
        async with (
            serve(tmp_path, dataspace_secret=SECRET, max_frame_size=LIMIT) as srv,
            aiohttp.ClientSession() as http,
        ):
            for frame in frames:
                async with raw(srv, http, "ws") as c:
                    await c.send(frame)
                    try:
                        packet = await c.recv(timeout=0.1)
                    except TimeoutError:
                        continue  # accepted (a Nop, an extension): nothing to answer
                    if packet is not None:
                        assert isinstance(packet, Error)
                        assert packet.detail.fields[0] in KNOWN
            async with raw(srv, http, "ws") as c:
                assert await c.resolved() == 1

    caplog.clear()
    asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
