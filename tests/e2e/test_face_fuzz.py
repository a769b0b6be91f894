"""Fuzz every face over real sockets: nesting and size at and beyond the limits, garbage.

Each frame gets a typed error (a name from ``errors.py``) or is accepted; the connection is
closed only where ``hub.policy`` says so; nothing is logged as an unexpected failure; and the
server still serves a producer and a subscriber afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from octosync.errors import all_errors
from octosync.signaling import SIGNAL_ERROR_CODES
from octosync.wire import cbor, jsabi, topgun, wvp
from octosync.yjs import messages as yjs_messages
from tests.e2e.helpers import (
    Follower,
    TcpLazily,
    delta,
    follow_until,
    handshake,
    serve,
    snap,
    ws_lazily,
)

LIMIT = 4096
KNOWN = {cls.name for cls in all_errors()} | set(SIGNAL_ERROR_CODES.values())


def nested(open_: bytes, close: bytes, depth: int, inner: bytes = b"") -> bytes:
    return open_ * depth + inner + close * depth


DEPTHS = st.sampled_from([1, 63, 64, 65, 400, 401, 1000, 100_000])

json_frames = st.one_of(
    st.binary(max_size=64),
    DEPTHS.map(lambda d: nested(b"[", b"]", d)),
    DEPTHS.map(lambda d: b'{"type":"delta","x":' + nested(b"[", b"]", d) + b"}"),
    DEPTHS.map(lambda d: b'{"type":"relay","to":1,"payload":' + nested(b"[", b"]", d) + b"}"),
    st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1]).map(lambda n: b'"' + b"a" * (n - 2) + b'"'),
    st.sampled_from([2**53 + 1, 2**64, -1]).map(
        lambda n: json.dumps({"type": "delta", "base_epoch": n, "epoch": n + 1}).encode()
    ),
    st.just(b'{"type":"\xff"}'),
)


def crdt_frame(peer: int, wall: int, state: object, key: object = "x/lww") -> bytes:
    op = {"slot_id": 1, "stamp": {"wall_time": wall, "logical": 0, "peer": peer}}
    return json.dumps({"type": "crdt_sync", "ops": [{**op, "state": state, "key": key}]}).encode()


plane_frames = st.one_of(
    json_frames,
    st.builds(
        crdt_frame,
        st.sampled_from([5, 6, 0, 2**53, 2**64]),  # its own peer is 5
        st.sampled_from([0, 1, 2**40, 2**53, 2**64 - 1, -1]),
        st.sampled_from(
            [
                "MQ==",
                "not base64",
                {"offset": 0, "len": 1, "generation": 0, "epoch": 0, "checksum": 0},
                None,
                7,
            ]
        ),
        st.sampled_from(["x/lww", "", "/", "a//b", None, 3, "k" * 2000]),
    ),
    st.just(
        b'{"CrdtSync":{"ops":[{"node":1,"key":null,"stamp":{"wall_time":1,"logical":0,'
        b'"peer":5},"state":{"Inline":[1]}}]}}'
    ),
    st.just(b'{"type":"crdt_sync","frontier":[[5,{"wall_time":1,"logical":0,"peer":5}]]}'),
    st.just(b'{"type":"snapshot","epoch":1}'),
    st.just(b'{"type":"crdt_sync","ops":' + b"[" * 70 + b"]" * 70 + b"}"),
)


def packet(payload: bytes, *, magic: bytes = b"JIT!", version: int = 1, fix: int = 0) -> bytes:
    header = struct.pack(">4sHHI", magic, version, 0, len(payload) + fix)
    return header + payload + b"\x00" * 32


wvp_frames = st.one_of(
    st.binary(max_size=64),
    DEPTHS.map(lambda d: jsabi.encode_packet(nested(b"\x81", b"", d, b"\x00"))),
    DEPTHS.map(lambda d: jsabi.encode_packet(b"\x9f" * min(d, 500) + b"\xff" * min(d, 500))),
    st.sampled_from([LIMIT - 44, LIMIT - 43, LIMIT]).map(
        lambda n: jsabi.encode_packet(cbor.encode(b"x" * (n - 44 - 3)))
    ),
    st.binary(min_size=1, max_size=40).map(lambda p: packet(p, magic=b"JIT?")),
    st.binary(min_size=1, max_size=40).map(lambda p: packet(p, version=2)),
    st.binary(min_size=1, max_size=40).map(lambda p: packet(p, fix=1)),
    st.binary(min_size=1, max_size=40).map(lambda p: packet(p)),  # bad checksum
    st.just(jsabi.encode_packet(b"\xa2\x61a\x00\x61a\x01")),  # duplicate CBOR keys
    st.just(
        jsabi.encode_packet(
            cbor.encode({"op": "subscribe_warp", "ts": 1, "payload": {"warp_id": 2**64 - 1}})
        )
    ),
)


async def expect_typed(ws: aiohttp.ClientWebSocketResponse, decode: Any) -> bool:
    """Drain what the server says for a while; every error is typed. False once closed."""
    while True:
        try:
            msg = await asyncio.wait_for(ws.receive(), 0.05)
        except TimeoutError:
            return True
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
            assert msg.data in (1000, 1002, 1008, 1009) or msg.type == aiohttp.WSMsgType.CLOSED
            return False
        name = decode(msg.data)
        if name is not None:
            assert name in KNOWN, name


def json_error(data: str | bytes) -> str | None:
    doc = json.loads(data)
    return doc.get("code") if doc.get("type") == "error" else None


def topgun_error(data: bytes) -> str | None:
    msg = topgun.decode(data)
    if isinstance(msg, topgun.Error):
        details = msgspec.msgpack.decode(msg.payload.details)
        return str(details["name"])
    return None


def wvp_error(data: bytes) -> str | None:
    msg = wvp.decode(data)[0]
    return msg.name if isinstance(msg, wvp.ErrorPayload) else None


async def still_serves(srv: Any, http: aiohttp.ClientSession) -> None:
    prod, _ = await ws_lazily(http, srv.ws_url, "after", publish=True)
    await prod.send_bytes(snap(0, {1: b"a"}))
    await prod.send_bytes(delta(0, 1, b"b"))
    sub, _ = await ws_lazily(http, srv.ws_url, "after")
    got = await follow_until(sub, Follower(), 1)
    assert got.values == {1: b"b"}


def run(tmp: Path, scenario: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with (
            serve(tmp, max_frame_size=LIMIT) as srv,
            aiohttp.ClientSession() as http,
        ):
            await scenario(srv, http)
            await still_serves(srv, http)

    caplog.clear()
    asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


FUZZ = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(frames=st.lists(json_frames, min_size=1, max_size=12))
def test_lazily_websocket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]
) -> None:
    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws, _ = await ws_lazily(http, srv.ws_url, "fuzz", publish=True)
        for frame in frames:
            await ws.send_bytes(frame)
            if not await expect_typed(ws, json_error):
                ws, _ = await ws_lazily(http, srv.ws_url, "fuzz", publish=True)

    run(tmp_path, scenario, caplog)


@FUZZ
@given(frames=st.lists(plane_frames, min_size=1, max_size=12))
def test_lazily_shared_document(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]
) -> None:
    hello = handshake("fuzz-doc", peer_id=5, features=["distributed_crdt"]).decode()

    async def open_(srv: Any, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_str(hello)
        assert "protocol_id" in json.loads(await ws.receive_str())  # the reply
        assert json.loads(await ws.receive_str())["type"] == "crdt_sync"  # the document
        return ws

    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws = await open_(srv, http)
        for frame in frames:
            await ws.send_bytes(frame)
            if not await expect_typed(ws, json_error):
                ws = await open_(srv, http)
        # the document still takes a write and acknowledges it (in the seed dialect, or the
        # tagged one once a tagged frame switched the member to it)
        tagged = b'{"CrdtSync":{"ops":[{"node":1,"key":"ok/lww","stamp":{"wall_time":1099511627776,'
        tagged += b'"logical":0,"peer":5},"state":{"Inline":[49]}}]}}'
        await ws.send_bytes(crdt_frame(5, 2**40, "MQ==", "ok/lww"))
        await ws.send_bytes(tagged)
        while '"ok/lww"' not in await asyncio.wait_for(ws.receive_str(), 5):
            pass

    run(tmp_path, scenario, caplog)


@FUZZ
@given(frames=st.lists(json_frames, min_size=1, max_size=12))
def test_signal(tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]) -> None:
    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws = await http.ws_connect(f"{srv.ws_url}/signal")
        for frame in frames:
            await ws.send_bytes(frame)
            if not await expect_typed(ws, json_error):
                ws = await http.ws_connect(f"{srv.ws_url}/signal")

    run(tmp_path, scenario, caplog)


@FUZZ
@given(frames=st.lists(wvp_frames, min_size=1, max_size=12))
def test_wvp(tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]) -> None:
    hello = jsabi.encode_packet(
        cbor.encode(
            {"op": "handshake", "ts": 1, "payload": {"capabilities": [], "client_version": 1}}
        )
    )

    async def open_(srv: Any, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        ws = await http.ws_connect(f"{srv.ws_url}/wvp", max_msg_size=0)
        await ws.send_bytes(hello)
        assert isinstance(wvp.decode(await ws.receive_bytes())[0], wvp.HandshakeAck)
        return ws

    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws = await open_(srv, http)
        for frame in frames:
            await ws.send_bytes(frame)
            if not await expect_typed(ws, wvp_error):
                ws = await open_(srv, http)

    run(tmp_path, scenario, caplog)


@FUZZ
@given(frames=st.lists(json_frames, min_size=1, max_size=12))
def test_lazily_tcp(tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]) -> None:
    async def open_(port: int) -> TcpLazily:
        conn = await TcpLazily.open(port)
        conn.send(handshake("fuzz-tcp", publish=True))
        assert json.loads(await conn.recv())["protocol_id"]
        return conn

    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        assert srv.tcp_port is not None
        conn = await open_(srv.tcp_port)
        for frame in frames:
            conn.send(frame)
            try:
                reply = await asyncio.wait_for(conn.recv(), 0.05)
            except TimeoutError:
                continue
            except (asyncio.IncompleteReadError, ConnectionError):
                # Closed after a refused frame; unread input may turn the close into a reset.
                conn = await open_(srv.tcp_port)
                continue
            name = json_error(reply)
            assert name is None or name in KNOWN
            if name in ("DecodeError", "Oversize"):  # framing is lost on a byte stream
                with contextlib.suppress(ConnectionError):
                    assert await conn.closed()
                conn = await open_(srv.tcp_port)

    async def main() -> None:
        async with (
            serve(tmp_path, max_frame_size=LIMIT, tcp_port=0) as srv,
            aiohttp.ClientSession() as http,
        ):
            await scenario(srv, http)
            await still_serves(srv, http)

    caplog.clear()
    asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


topgun_frames = st.one_of(
    st.binary(max_size=64),
    DEPTHS.map(lambda d: b"\x91" * d + b"\xc0"),
    DEPTHS.map(
        lambda d: (
            msgspec.msgpack.encode({"type": "TOPIC_PUB", "payload": {"topic": "t"}})[:-1]
            + b"\x91" * d
            + b"\xc0"
        )
    ),
    st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1]).map(lambda n: b"\xc4" + b"x" * n),
    st.sampled_from(
        [
            {"type": "OP_BATCH", "payload": {"ops": [{"mapName": "m", "key": "k"}]}},
            {"type": "OP_BATCH", "payload": {"ops": [], "writeConcern": "NEVER"}},
            {"type": "MERKLE_REQ_BUCKET", "payload": {"mapName": "m", "path": "zz"}},
            {"type": "ORMAP_MERKLE_REQ_BUCKET", "payload": {"mapName": "m", "path": "0123"}},
            {
                "type": "QUERY_SUB",
                "payload": {"queryId": "q", "mapName": "m", "query": {"predicate": {"op": "nope"}}},
            },
            {"type": "TOPIC_SUB", "payload": {"topic": "no spaces"}},
            {"type": "LOCK_RELEASE", "payload": {"name": "l", "fencingToken": -1}},
            {"type": "AUTH", "token": "x"},
            {"type": "OP_ACK", "payload": {"lastId": "1"}},
        ]
    ).map(msgspec.msgpack.encode),
)


@FUZZ
@given(frames=st.lists(topgun_frames, min_size=1, max_size=12))
def test_topgun(tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes]) -> None:
    async def open_(srv: Any, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        ws = await http.ws_connect(f"{srv.ws_url}/topgun")
        await ws.send_bytes(topgun.encode(topgun.DeviceHello()))
        assert isinstance(topgun.decode(await ws.receive_bytes()), topgun.DeviceAck)
        return ws

    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws = await open_(srv, http)
        for frame in frames:
            await ws.send_bytes(frame)
            if not await expect_typed(ws, topgun_error):
                ws = await open_(srv, http)

    run(tmp_path, scenario, caplog)


def _yjs_body(kind: int, sub: int, payload: bytes) -> bytes:
    return bytes((kind, sub)) + yjs_messages.var_uint(len(payload)) + payload


yjs_frames = st.one_of(
    st.binary(max_size=64),
    st.builds(_yjs_body, st.integers(0, 10), st.integers(0, 3), st.binary(max_size=64)),
    st.builds(  # updates at and past the update limit (half the frame limit)
        lambda n: yjs_messages.sync_update(b"\x01" * n),
        st.sampled_from([LIMIT // 2 - 1, LIMIT // 2 + 1, LIMIT - 8]),
    ),
    st.builds(  # structurally plausible updates: one client, garbage structs
        lambda client, body: yjs_messages.sync_update(
            b"\x01\x01" + yjs_messages.var_uint(client) + body
        ),
        st.sampled_from([0, 1, 2**32, 2**53 - 1]),
        st.binary(max_size=48),
    ),
    st.builds(  # awareness entries with states that may not be JSON
        lambda client, clock, state: yjs_messages.awareness(
            b"\x01"
            + yjs_messages.var_uint(client)
            + yjs_messages.var_uint(clock)
            + yjs_messages.var_uint(len(state))
            + state
        ),
        st.sampled_from([0, 1, 2**53 - 1]),
        st.sampled_from([0, 1, 2**53 - 1]),
        st.sampled_from([b"null", b"{}", b"{", b"\xff", b'"' + b"a" * 5000 + b'"']),
    ),
    st.just(b"\xff" * 10),  # a var uint past 2^53
)


@FUZZ
@given(frames=st.lists(yjs_frames, min_size=1, max_size=12), hocuspocus=st.booleans())
def test_yjs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, frames: list[bytes], hocuspocus: bool
) -> None:
    address = yjs_messages.address_prefix("fuzz")

    async def open_(srv: Any, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        if not hocuspocus:
            ws = await http.ws_connect(f"{srv.ws_url}/yjs/fuzz")
            await ws.receive_bytes()  # the server's step 1
            return ws
        ws = await http.ws_connect(f"{srv.ws_url}/yjs")
        await ws.send_bytes(address + bytes((yjs_messages.AUTH, yjs_messages.AUTH_TOKEN, 0)))
        assert await ws.receive_bytes() == address + yjs_messages.authenticated(False)
        return ws

    async def scenario(srv: Any, http: aiohttp.ClientSession) -> None:
        ws = await open_(srv, http)
        for frame in frames:
            await ws.send_bytes(address + frame if hocuspocus else frame)
            if not await expect_typed(ws, lambda data: None):
                ws = await open_(srv, http)

    run(tmp_path, scenario, caplog)
