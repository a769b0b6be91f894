"""``/chain/{name}`` over a real WebSocket, relayed to a real link process over TCP."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from octosync.links.cli import start_node
from octosync.server.auth import AuthConfig, issue_token
from tests.e2e.helpers import chain_record as receive
from tests.e2e.helpers import serve

SECRET = "s" * 32


@pytest.fixture
async def face_url(nats_url: str, tmp_path: Path) -> AsyncIterator[str]:
    proc: subprocess.Popen[str]
    proc, _ = await asyncio.to_thread(
        start_node, "ws", "n1", nats_url, "octosync.chain.game:compute", tmp_path / "n1"
    )
    auth = AuthConfig(hs256_secret=SECRET)
    try:
        async with serve(tmp_path, insecure_dev=False, auth=auth, chain_config=nats_url) as srv:
            yield f"{srv.url}/chain/ws"
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_device_bootstraps_sends_and_sees_state(face_url: str) -> None:
    token = issue_token(SECRET, "alice", {"chain/ws": ["publish"]})
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{face_url}?token={token}") as ws:
        await ws.send_str(json.dumps({"Type": "BootstrapChainRequest", "NextDeviceSequencer": 1}))
        complete = await receive(ws, "BootstrapComplete")
        assert complete["NextDeviceSequencer"] == 1
        event = {"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "join", "Payload": "{}"}
        await ws.send_str(json.dumps(event))
        notice = await receive(ws, "DeviceNotice")
        assert notice["Acked"] == [1]
        update = await receive(ws, "StateUpdate")
        assert update["Consumed"] == {"alice": [1]}
        assert update["Change"]["players"]["alice"]["score"] == 0


async def test_refuses_without_a_grant_and_bad_json(face_url: str) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(face_url)
        assert info.value.status == 401
        other = issue_token(SECRET, "bob", {"chain/other": ["publish"]})
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(f"{face_url}?token={other}")
        token = issue_token(SECRET, "bob", {"chain/ws": ["publish"]})
        async with http.ws_connect(f"{face_url}?token={token}") as ws:
            await ws.send_str(json.dumps({"Type": "DeviceEvent", "DeviceSequencer": -1}))
            error = await receive(ws, "Error")
            assert error["Code"] == "DecodeError"
            # the shared policy: a bad message on a WebSocket is refused, the socket stays; the
            # first record must still be the bootstrap
            event = {"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "join", "Payload": "{}"}
            await ws.send_str(json.dumps(event))
            error = await receive(ws, "Error")
            assert error["Code"] == "HandshakeFailed"
            closing = await asyncio.wait_for(ws.receive(), 10)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
