"""Hostile and broken clients over real sockets: each gets a typed error, nobody else notices.

Every test runs a canary (a producer and a subscriber of an unrelated stream) beside the
attack and checks that the canary received every delta, in order, with no gap. How long the
event loop paused is a speed figure, measured in ``bench/hostile.py``, not asserted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from octosync.hub import ViewKey
from octosync.hub.limits import MAX_EPOCH
from octosync.ipc.messages import Delta, EdgeAdd, NodeAdd, NodeRemove, NodeSnapshot, Snapshot
from octosync.server.auth import AuthConfig, issue_token
from octosync.store.journal import Journal
from octosync.wire import cbor, jsabi, topgun, wvp
from tests.e2e.helpers import (
    TIMEOUT,
    Follower,
    Running,
    TcpLazily,
    delta,
    follow_until,
    handshake,
    recv_json,
    serve,
    snap,
    spawn_server,
    ws_lazily,
)

SECRET = "hostile-test-secret-hostile-test-secret"
CANARY_DELTAS = 300


@dataclass
class Canary:
    """A producer and a subscriber of stream ``canary`` that must never notice anything."""

    follower: Follower = field(default_factory=Follower)
    published: int = 0
    errors: list[Any] = field(default_factory=list)


@contextlib.asynccontextmanager
async def canary(
    srv: Running, http: aiohttp.ClientSession, token: str | None = None
) -> AsyncIterator[Canary]:
    state = Canary()
    prod, _ = await ws_lazily(http, srv.ws_url, "canary", publish=True, token=token)
    await prod.send_bytes(snap(0, {1: b"0"}))
    sub, _ = await ws_lazily(http, srv.ws_url, "canary", token=token)
    await follow_until(sub, state.follower, 0)

    async def publish() -> None:
        for epoch in range(CANARY_DELTAS):
            await prod.send_bytes(delta(epoch, 1, str(epoch + 1).encode()))
            state.published = epoch + 1
            await asyncio.sleep(0.002)

    async def watch_errors() -> None:
        async for msg in prod:
            state.errors.append(msg.data)

    task = asyncio.create_task(publish())
    errors = asyncio.create_task(watch_errors())
    try:
        yield state
        await task
        await follow_until(sub, state.follower, CANARY_DELTAS)
    finally:
        task.cancel()
        errors.cancel()
    assert state.follower.gaps == 0
    assert state.follower.snapshots == 1  # never reset
    assert state.follower.deltas == CANARY_DELTAS
    assert state.follower.values == {1: str(CANARY_DELTAS).encode()}
    assert state.errors == []


def packet(op: str, payload: Any, ts: int = 1) -> bytes:
    return jsabi.encode_packet(cbor.encode({"op": op, "ts": ts, "payload": payload}))


WVP_HELLO = packet("handshake", {"capabilities": [], "client_version": 1})


async def wvp_open(
    http: aiohttp.ClientSession, srv: Running, token: str | None = None
) -> aiohttp.ClientWebSocketResponse:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    ws = await http.ws_connect(f"{srv.ws_url}/wvp", headers=headers, max_msg_size=0)
    await ws.send_bytes(WVP_HELLO)
    reply, _ = wvp.decode(await asyncio.wait_for(ws.receive_bytes(), TIMEOUT))
    assert isinstance(reply, wvp.HandshakeAck)
    return ws


async def wvp_recv(ws: aiohttp.ClientWebSocketResponse) -> wvp.Message:
    return wvp.decode(await asyncio.wait_for(ws.receive_bytes(), TIMEOUT))[0]


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    """Read until the server closes; the close code it sent."""
    while True:
        msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
        if msg.type == aiohttp.WSMsgType.CLOSE:
            return int(msg.data)
        if msg.type == aiohttp.WSMsgType.CLOSED:
            return ws.close_code


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# 1. nothing is read (or decoded) before credentials -------------------------------------


@pytest.mark.parametrize("face", ["/lazily", "/wvp", "/signal", "/dataspace"])
async def test_no_frame_is_read_before_credentials(tmp_path: Path, face: str) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    token = issue_token(SECRET, "c", {"canary": ["read", "publish"]})
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
        canary(srv, http, token),
    ):
        big = packet(
            "warp_stream",
            {
                "warp_id": 1,
                "frame": {"Snapshot": {"epoch": 0, "graph": [{0: 0}] * 20_000, "state_hash": None}},
            },
        )
        for _ in range(3):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{srv.ws_url}{face}")
            assert refused.value.status == 401
        async with http.post(f"{srv.url}{face}", data=big) as resp:
            assert resp.status in (401, 405)  # not an upgrade at all: never read as a frame
        assert srv.runtime.counters.refused_upgrades == 3
        if face != "/lazily":  # the canary's frames arrive on /lazily
            assert srv.runtime.counters.faces[face.strip("/")].frames_in == 0


# 2. a failure serving one subscriber touches nobody else --------------------------------


async def test_a_lazily_subscriber_cannot_name_a_wvp_stream(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http, canary(srv, http):
        producer = await wvp_open(http, srv)
        await producer.send_bytes(
            packet(
                "warp_stream",
                {
                    "warp_id": 9,
                    "frame": {"Snapshot": {"epoch": 0, "graph": {"n": 1}, "state_hash": None}},
                },
            )
        )
        sub, reply = await ws_lazily(http, srv.ws_url, "warp:9")
        assert reply["type"] == "error"
        assert reply["code"] == "HandshakeFailed"
        assert "wvp face" in reply["message"]
        assert await closed_with(sub) == 1008
        _, reply = await ws_lazily(http, srv.ws_url, "warp:9", publish=True)
        assert reply["code"] == "HandshakeFailed"
        assert srv.runtime.hub.producer_of("warp:9") is not None


async def test_a_subscriber_whose_encoding_fails_is_reset_alone(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http, canary(srv, http):
        hub = srv.runtime.hub

        def brittle(frame: Any) -> bytes:
            if frame.kind == "diff":
                raise TypeError("injected encoder failure")
            from octosync.wire.websocket import ws_frame

            return ws_frame(msgspec.json.encode(frame.body), text=True)

        hub.register_encoder("lazily-brittle/ws", brittle)
        prod, _ = await ws_lazily(http, srv.ws_url, "victim", publish=True)
        await prod.send_bytes(snap(0, {1: b"a"}))
        doomed, _ = await ws_lazily(http, srv.ws_url, "victim")
        bystander, _ = await ws_lazily(http, srv.ws_url, "victim")
        await follow_until(doomed, Follower(), 0)
        seen = await follow_until(bystander, Follower(), 0)
        conn = sorted(hub.subscribers_of("victim"))[0]  # the first to subscribe: ``doomed``
        hub.change_view(conn, ViewKey("lazily", "lazily-brittle/ws"))
        for epoch in range(20):
            await prod.send_bytes(delta(epoch, 1, b"%d" % epoch))
        error = await recv_json(doomed)
        while error.get("type") != "error":
            error = await recv_json(doomed)
        assert error["code"] == "InternalError"
        assert await closed_with(doomed) == 1011
        await follow_until(bystander, seen, 20)
        assert seen.gaps == 0


# 3 & 4. one set of limits for hub and journal -------------------------------------------


async def test_what_the_journal_cannot_hold_is_refused_before_the_hub_changes(
    tmp_path: Path,
) -> None:
    async with (
        serve(tmp_path, journal=True) as srv,
        aiohttp.ClientSession() as http,
        canary(srv, http),
    ):
        producer = await wvp_open(http, srv)

        async def send(frame: dict[str, Any]) -> None:
            await producer.send_bytes(packet("warp_stream", {"warp_id": 4, "frame": frame}))

        await send({"Snapshot": {"epoch": 0, "graph": {"n": 0}, "state_hash": None}})
        await send(
            {"Diff": {"from_epoch": 0, "to_epoch": MAX_EPOCH + 1, "ops": [], "state_hash": None}}
        )
        too_far = await wvp_recv(producer)
        assert isinstance(too_far, wvp.ErrorPayload)
        assert (too_far.name, too_far.details) == ("LimitExceeded", {"path": "to_epoch"})
        await send({"Diff": {"from_epoch": 0, "to_epoch": 1, "ops": ["ok"], "state_hash": None}})
        viewer = await wvp_open(http, srv)
        await viewer.send_bytes(packet("subscribe_warp", {"warp_id": 4}))
        replay = [await wvp_recv(viewer), await wvp_recv(viewer)]
        assert replay == [
            wvp.WarpStream(4, wvp.WarpSnapshot(0, {"n": 0})),
            wvp.WarpStream(4, wvp.WarpDiff(0, 1, ["ok"])),
        ]
        long_name = "n" * 300
        _, reply = await ws_lazily(http, srv.ws_url, long_name, publish=True)
        assert reply["code"] == "HandshakeFailed"
        assert reply["message"].endswith("stream name of 300 characters exceeds 256")
    with Journal(tmp_path) as journal:
        frames = [e.record for e in journal.frames("warp:4")]
    assert [(f.base_epoch, f.epoch) for f in frames] == [(0, 0), (0, 1)]  # type: ignore[union-attr]


# 5. node_remove against many edges ---------------------------------------------------------


async def test_a_large_node_remove_is_applied_and_nobody_waits(tmp_path: Path) -> None:
    big = serve(tmp_path, max_frame_size=4 << 20)
    async with big as srv, aiohttp.ClientSession() as http, canary(srv, http):
        prod, _ = await ws_lazily(http, srv.ws_url, "dense", publish=True)
        n = 300
        nodes = tuple(NodeSnapshot(i, "bytes", "resolved", b"v") for i in range(n))
        await prod.send_bytes(msgspec.json.encode(Snapshot(epoch=0, nodes=nodes)))
        edges = tuple(EdgeAdd(a, b) for a in range(n) for b in range(a + 1, min(n, a + 160)))
        await prod.send_bytes(msgspec.json.encode(Delta(0, 1, edges)))
        removes = tuple(NodeRemove(i) for i in range(0, n, 2))
        await prod.send_bytes(msgspec.json.encode(Delta(1, 2, removes)))
        sub, _ = await ws_lazily(http, srv.ws_url, "dense")
        got = await follow_until(sub, Follower(), 2)
        assert sorted(got.values) == list(range(1, n, 2))


# 7. malformed input gets a typed error, never a traceback ------------------------------


async def test_malformed_frames_get_typed_errors_and_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nested = b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}"
    deep = b'{"type":"relay","to":1,"payload":' + b"[" * 5000 + b"]" * 5000 + b"}"
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http, canary(srv, http):
        prod, _ = await ws_lazily(http, srv.ws_url, "m", publish=True)
        await prod.send_bytes(nested)
        assert (await recv_json(prod))["code"] in ("DecodeError", "LimitExceeded")
        await prod.send_bytes(snap(0, {1: b"a"}))
        unresolved = Delta(0, 1, (NodeAdd(5, "bytes", None, state="resolved"),))
        await prod.send_bytes(msgspec.json.encode(unresolved))
        refused = await recv_json(prod)
        assert refused["code"] == "RemoteProtocolError"
        assert refused["message"].endswith(
            "node_add 5: payload must be present exactly when resolved"
        )
        signal_ws = await http.ws_connect(f"{srv.ws_url}/signal")
        await signal_ws.send_bytes(b'{"type":"\xff"}')
        assert (await recv_json(signal_ws))["code"] == "decode_error"
        await signal_ws.send_bytes(deep)
        assert (await recv_json(signal_ws))["code"] in ("decode_error", "LimitExceeded")
        await signal_ws.send_str(json.dumps({"type": "join", "peer": 1}))
        assert (await recv_json(signal_ws))["type"] == "welcome"
        viewer = await wvp_open(http, srv)
        await viewer.send_bytes(b"JIT!" + b"\x00" * 40)
        bad = await wvp_recv(viewer)
        assert isinstance(bad, wvp.ErrorPayload)
        assert bad.name == "DecodeError"
    assert server_errors(caplog) == []


# 6. SIGTERM with a subscriber that stopped reading --------------------------------------


async def test_sigterm_exits_although_a_subscriber_stopped_reading(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as server, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, server.url, "flood", publish=True)
        await prod.send_bytes(snap(0, {1: b"x" * 60_000}))
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", server.port))
        stalled.sendall(
            b"GET /lazily HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        hs = handshake("flood")
        mask = b"\x00\x00\x00\x00"
        stalled.sendall(bytes([0x81, 0x80 | 126]) + len(hs).to_bytes(2, "big") + mask + hs)
        for epoch in range(200):
            await prod.send_bytes(delta(epoch, 1, b"y" * 60_000))
        await asyncio.sleep(0.5)
        server.proc.send_signal(signal.SIGTERM)
        # Bounded wait, not a speed figure: before the shutdown deadline it never exited.
        assert server.proc.wait(timeout=60) == 0
        stalled.close()
        err = server.proc.stderr.read().decode() if server.proc.stderr else ""
        assert "Traceback" not in err


# 8. authorization on open connections, signaling and notifications ----------------------


async def test_an_open_connection_is_closed_when_its_token_expires(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
    ):
        short = issue_token(SECRET, "s", {"e": ["read", "publish"]}, exp=int(time.time()) + 2)
        prod, _ = await ws_lazily(http, srv.ws_url, "e", publish=True, token=short)
        await prod.send_bytes(snap(0, {1: b"a"}))
        doc = await recv_json_within(prod, 10)
        assert doc["code"] == "Unauthorized"
        assert doc["message"].endswith("the token expired")
        assert await closed_with(prod) == 1008


async def recv_json_within(ws: aiohttp.ClientWebSocketResponse, seconds: float) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), seconds)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


async def test_signaling_and_notifications_need_grants(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
    ):
        nobody = issue_token(SECRET, "n", {})
        ws = await http.ws_connect(f"{srv.ws_url}/signal?session=lobby&token={nobody}")
        await ws.send_str(json.dumps({"type": "join", "peer": 1}))
        assert (await recv_json(ws))["code"] == "permission_denied"
        member = issue_token(SECRET, "m", {}, rooms={"lobby": ["join"]})
        ws = await http.ws_connect(f"{srv.ws_url}/signal?session=lobby&token={member}")
        await ws.send_str(json.dumps({"type": "join", "peer": 1}))
        assert (await recv_json(ws))["type"] == "welcome"

        reader = issue_token(SECRET, "r", {"warp:1": ["read", "publish"]})
        listener = await wvp_open(http, srv, reader)
        await listener.send_bytes(packet("subscribe_warp", {"warp_id": 1}))
        sender = await wvp_open(http, srv, issue_token(SECRET, "x", {"warp:2": ["publish"]}))
        note = {"kind": "Info", "title": "hi", "body": None}
        await sender.send_bytes(packet("notification", {**note, "scope": {"Warp": 1}}))
        denied = await wvp_recv(sender)
        assert isinstance(denied, wvp.ErrorPayload)
        assert denied.name == "Forbidden"
        await sender.send_bytes(packet("notification", {**note, "scope": "Global"}))
        assert (await wvp_recv(sender)).name == "Forbidden"  # type: ignore[union-attr]
        announcer = await wvp_open(http, srv, issue_token(SECRET, "a", {"$global": ["publish"]}))
        await announcer.send_bytes(packet("notification", {**note, "scope": "Global"}))
        heard = await wvp_recv(listener)
        assert isinstance(heard, wvp.Notification)
        assert heard.title == "hi"


# 9. caps and deadlines: idle and flooding clients hold nothing --------------------------


async def test_caps_and_deadlines_keep_descriptors_for_clients_that_behave(
    tmp_path: Path,
) -> None:
    overrides = dict(max_connections_per_address=5, request_timeout=0.3, handshake_timeout=0.3)
    async with serve(tmp_path, **overrides) as srv, aiohttp.ClientSession() as http:
        port = int(srv.ws_url.rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()

        async def from_second_address() -> socket.socket:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", port))
            return s

        idle = [await from_second_address() for _ in range(5)]
        refused = await from_second_address()
        answer = await asyncio.wait_for(loop.sock_recv(refused, 4096), TIMEOUT)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b'"code": "Overloaded"' in answer
        # A client on another address is served while the idle ones are held.
        async with canary(srv, http):
            pass
        # The idle ones never sent a request: the deadline closes them all.
        for s in idle:
            assert await asyncio.wait_for(loop.sock_recv(s, 1), TIMEOUT) == b""
            s.close()
        refused.close()
        assert srv.runtime.counters.deadline_closes == 5
        # An upgraded WebSocket that never sends its handshake is closed too.
        silent = await http.ws_connect(f"{srv.ws_url}/lazily")
        doc = await recv_json(silent)
        assert doc["code"] == "HandshakeFailed"
        assert await closed_with(silent) == 1008
        assert srv.runtime.guard.held_by("127.0.0.2") == 0


# every face: the same typed error for a frame over the configured limit ----------------


@pytest.mark.parametrize("face", ["lazily", "tcp", "wvp", "signal", "topgun"])
async def test_every_face_refuses_an_oversize_frame_with_the_same_error(
    tmp_path: Path, face: str
) -> None:
    limit = 2048
    async with (
        serve(tmp_path, max_frame_size=limit, tcp_port=0) as srv,
        aiohttp.ClientSession() as http,
    ):
        big = b"x" * (limit + 1)
        if face == "tcp":
            assert srv.tcp_port is not None
            conn = await TcpLazily.open(srv.tcp_port)
            conn.send(handshake("o", publish=True))
            await conn.recv()
            conn.send(big)
            assert json.loads(await conn.recv())["code"] == "Oversize"
            assert await conn.closed()
            return
        if face == "wvp":
            ws = await wvp_open(http, srv)
            await ws.send_bytes(big)
            err = await wvp_recv(ws)
            assert isinstance(err, wvp.ErrorPayload)
            name = err.name
        elif face == "topgun":
            ws = await http.ws_connect(f"{srv.ws_url}/topgun")
            await ws.send_bytes(topgun.encode(topgun.DeviceHello()))
            assert isinstance(topgun.decode(await ws.receive_bytes()), topgun.DeviceAck)
            await ws.send_bytes(big)
            reply = topgun.decode(await asyncio.wait_for(ws.receive_bytes(), TIMEOUT))
            assert isinstance(reply, topgun.Error)
            name = msgspec.msgpack.decode(reply.payload.details)["name"]
        else:
            if face == "lazily":
                ws, _ = await ws_lazily(http, srv.ws_url, "o", publish=True)
            else:
                ws = await http.ws_connect(f"{srv.ws_url}/signal")
            await ws.send_bytes(big)
            name = (await recv_json(ws))["code"]
        assert name == "Oversize"
        assert await closed_with(ws) == 1009


async def test_frames_during_shutdown_get_a_typed_error(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "late", publish=True)
        srv.runtime.closing = True  # what SIGTERM sets first
        await prod.send_bytes(snap(0, {1: b"a"}))
        doc = await recv_json(prod)
        assert doc["code"] == "ShuttingDown"
        assert await closed_with(prod) == 1001
        assert srv.runtime.hub.epoch_of("late") is None
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.ws_url}/lazily")
        assert refused.value.status == 503


def test_insecure_dev_refuses_a_network_address(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "octosync.cli",
            "serve",
            "--insecure-dev",
            "--host",
            "0.0.0.0",
            "--data",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "loopback only" in done.stderr
    assert "Traceback" not in done.stderr
    assert "serving" not in done.stdout
