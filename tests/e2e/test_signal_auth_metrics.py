"""/signal relay, JWT auth, /metrics, and graceful SIGTERM shutdown over real sockets."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from octosync.server.auth import AuthConfig, issue_token
from octosync.signaling import SignalingPolicy
from tests.e2e.helpers import (
    TIMEOUT,
    Follower,
    delta,
    follow_until,
    recv_json,
    serve,
    snap,
    spawn_server,
    ws_lazily,
)


async def sig(http: aiohttp.ClientSession, url: str, session: str = "room") -> Any:
    return await http.ws_connect(f"{url}/signal?session={session}")


async def test_signaling_relays_with_stamped_from_and_rejects_spoofing(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        a, b = await sig(http, srv.ws_url), await sig(http, srv.ws_url)
        await a.send_str(json.dumps({"type": "offer", "to": 2, "sdp": "early"}))
        assert (await recv_json(a))["code"] == "not_joined"
        await a.send_str(json.dumps({"type": "join", "peer": 1}))
        assert await recv_json(a) == {"type": "welcome", "peer": 1, "peers": []}
        await b.send_str(json.dumps({"type": "join", "peer": 2}))
        assert await recv_json(b) == {"type": "welcome", "peer": 2, "peers": [1]}
        assert await recv_json(a) == {"type": "peer-joined", "peer": 2}
        await a.send_str(json.dumps({"type": "offer", "to": 2, "from": 99, "sdp": "SPOOF"}))
        assert (await recv_json(a))["code"] == "decode_error"
        await a.send_str(json.dumps({"type": "relay", "to": 2, "payload": {"from": 99}}))
        assert await recv_json(b) == {"type": "relay", "from": 1, "payload": {"from": 99}}
        await b.send_str(json.dumps({"type": "answer", "to": 1, "sdp": "v=0"}))
        assert await recv_json(a) == {"type": "answer", "from": 2, "sdp": "v=0"}
        dup = await sig(http, srv.ws_url)
        await dup.send_str(json.dumps({"type": "join", "peer": 1}))
        assert (await recv_json(dup))["code"] == "duplicate_peer"
        await a.send_str(json.dumps({"type": "ice", "to": 3, "candidate": "c"}))
        # The spec's error frame: code and the bare message, no field-path prefix.
        assert await recv_json(a) == {
            "type": "error",
            "code": "unknown_target",
            "message": "peer 3 is not in this session",
        }
        await b.close()
        assert await recv_json(a) == {"type": "peer-left", "peer": 2}


async def test_signaling_allowlist_mode(tmp_path: Path) -> None:
    policy = SignalingPolicy("allowlist", {1: frozenset({2}), 2: frozenset()})
    async with serve(tmp_path, signaling=policy) as srv, aiohttp.ClientSession() as http:
        a, b, c = [await sig(http, srv.ws_url) for _ in range(3)]
        for ws, peer in ((a, 1), (b, 2)):
            await ws.send_str(json.dumps({"type": "join", "peer": peer}))
            await recv_json(ws)
        await recv_json(a)  # peer-joined 2
        await c.send_str(json.dumps({"type": "join", "peer": 3}))
        assert (await recv_json(c))["code"] == "permission_denied"
        await b.send_str(json.dumps({"type": "offer", "to": 1, "sdp": "x"}))
        assert (await recv_json(b))["code"] == "permission_denied"
        await a.send_str(json.dumps({"type": "offer", "to": 2, "sdp": "x"}))
        assert (await recv_json(b))["from"] == 1


SECRET = "test-secret-that-is-long-enough-for-hs256!"


async def test_jwt_grants_read_publish_write_per_stream(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
    ):
        # No frame is read without credentials: the upgrade itself is refused.
        async with http.get(f"{srv.ws_url.replace('ws', 'http', 1)}/lazily") as resp:
            assert resp.status == 401
            assert (await resp.json())["code"] == "Unauthorized"
        bad = issue_token("wrong-secret-wrong-secret-wrong-secret!", "eve", {"*": ["read"]})
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.ws_url}/lazily?token={bad}")
        assert refused.value.status == 401
        producer = issue_token(SECRET, "p", {"s": ["publish"]})
        reader = issue_token(SECRET, "r", {"s": ["read"]})
        prod, _ = await ws_lazily(http, srv.ws_url, "s", publish=True, token=producer)
        await prod.send_bytes(snap(0, {1: b"a"}))
        sub, _ = await ws_lazily(http, srv.ws_url, "s", token=reader)
        await follow_until(sub, Follower(), 0)
        await sub.send_bytes(delta(0, 1, b"w"))
        assert (await recv_json(sub))["code"] == "Forbidden"
        # Refusals that the handshake can decide come in place of its reply.
        _, refusal = await ws_lazily(http, srv.ws_url, "s", publish=True, token=reader)
        assert refusal["code"] == "Forbidden"
        assert "publish" in refusal["message"]
        _, refusal = await ws_lazily(http, srv.ws_url, "other", token=reader)
        assert refusal["code"] == "Forbidden"
        assert "read" in refusal["message"]


async def test_metrics_in_prometheus_text(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "m", publish=True)
        await prod.send_bytes(snap(0, {1: b"a"}))
        sub, _ = await ws_lazily(http, srv.ws_url, "m")
        await follow_until(sub, Follower(), 0)
        async with http.get(f"{srv.url}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
        lines = dict(
            line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
        )
        assert lines['octosync_connections{face="lazily"}'] == "2.0"
        assert lines["octosync_streams"] == "1.0"
        assert float(lines["octosync_frames_out_total"]) >= 3
        assert "octosync_outbox_depth" in lines
        assert "octosync_resets_total" in lines
        assert "octosync_coalesced_deltas_total" in lines


async def test_sigterm_flushes_and_closes_cleanly(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as server, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, server.url, "z", publish=True)
        await prod.send_bytes(snap(0, {1: b"a"}))
        sub, _ = await ws_lazily(http, server.url, "z")
        await follow_until(sub, Follower(), 0)
        server.proc.send_signal(signal.SIGTERM)
        closed = await asyncio.wait_for(sub.receive(), TIMEOUT)
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert server.proc.wait(timeout=10) == 0
        err = server.proc.stderr.read().decode() if server.proc.stderr else ""
        assert "insecure-dev" in err
        assert "Traceback" not in err
