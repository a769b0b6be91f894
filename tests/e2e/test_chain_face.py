"""``octosync serve --chain-config nats://...`` mounts ``/chain/{name}``: a WebSocket device
reaches the head of a running chain (real NATS, a real link process, a real server process),
bootstraps, and sees the state change with its own events and with another device's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from octosync.errors import ConfigError, ReplicationError
from octosync.links.cli import start_node
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.server.auth import issue_token
from octosync.server.config import ServerConfig, parse_config
from tests.e2e.helpers import chain_record as receive
from tests.e2e.helpers import serve, spawn_server

CHAIN = "face"
SECRET = "f" * 32
SERVE = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]


async def state_where(ws: aiohttp.ClientWebSocketResponse, path: tuple[str, ...]) -> Any:
    """The first StateUpdate whose change holds ``path``; the value there."""
    while True:
        change: Any = (await receive(ws, "StateUpdate"))["Change"]
        for key in path:
            change = change.get(key) if isinstance(change, dict) else None
        if change is not None:
            return change


async def test_a_websocket_device_through_the_server_reaches_a_running_chain(
    nats_url: str, tmp_path: Path
) -> None:
    link, _ = await asyncio.to_thread(
        start_node, CHAIN, "n1", nats_url, "octosync.chain.game:compute", tmp_path / "n1"
    )
    configs = await ConfigStore(nats_url, CHAIN).open()
    other = ChainDevice("carol", configs=configs)
    toml = tmp_path / "server.toml"
    toml.write_text(f'[auth]\nhs256_secret = "{SECRET}"\n')
    try:
        async with (
            spawn_server(
                tmp_path / "server", "--config", str(toml), "--chain-config", nats_url
            ) as server,
            aiohttp.ClientSession() as http,
        ):
            base = f"{server.url}/chain/{CHAIN}"
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{base}?token=not-a-jwt")
            assert refused.value.status == 401
            token = issue_token(SECRET, "alice", {f"chain/{CHAIN}": ["publish"]})
            async with http.ws_connect(f"{base}?token={token}") as ws:
                await ws.send_str(
                    json.dumps({"Type": "BootstrapChainRequest", "NextDeviceSequencer": 1})
                )
                complete = await receive(ws, "BootstrapComplete")
                assert complete["NextDeviceSequencer"] == 1
                join = {"Type": "DeviceEvent", "DeviceSequencer": 1, "Name": "join"}
                await ws.send_str(json.dumps({**join, "Payload": '{"name": "Alice"}'}))
                assert (await receive(ws, "DeviceNotice"))["Acked"] == [1]
                assert (await state_where(ws, ("players", "alice", "name"))) == "Alice"

                other.start()  # a TCP device on the same chain: alice sees its events too
                other.emit("join", json.dumps({"name": "Carol"}))
                other.emit("move", json.dumps({"dx": 3, "dy": 0}))
                assert (await state_where(ws, ("players", "carol", "x"))) == 3

            unknown = f"{server.url}/chain/nobody?device=erin"
            async with http.ws_connect(unknown) as ws:
                closing = await asyncio.wait_for(ws.receive(), 10)
                assert closing.type is aiohttp.WSMsgType.CLOSE
                assert closing.data == 1013  # no such chain: try later, nothing was created
            with pytest.raises(ReplicationError, match="no chain 'nobody'"):
                await ConfigStore(nats_url, "nobody").open(create=False)
            async with http.get(f"{server.url}/chain/not.a.chain?device=erin") as response:
                assert response.status == 404

            anonymous = f"{base}?device=dave"  # --insecure-dev: a device names itself
            async with http.ws_connect(anonymous) as ws:
                await ws.send_str(
                    json.dumps({"Type": "BootstrapChainRequest", "NextDeviceSequencer": 1})
                )
                complete = await receive(ws, "BootstrapComplete")
                assert complete["Change"]["players"]["carol"]["x"] == 3
    finally:
        await other.stop()
        await configs.close()
        link.kill()
        link.wait(timeout=10)


async def test_without_chain_config_there_is_no_chain_route(tmp_path: Path) -> None:
    async with (
        serve(tmp_path) as server,
        aiohttp.ClientSession() as http,
        http.get(f"{server.url}/chain/{CHAIN}") as response,
    ):
        assert response.status == 404


def test_chain_config_must_be_a_nats_url(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SERVE, "--chain-config", "http://x:1", "--port", "0", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "nats://HOST:PORT" in line
    with pytest.raises(ConfigError, match="NATS URL"):
        parse_config({"server": {"chain_config": "localhost:4222"}}, tmp_path, ServerConfig())
    parsed = parse_config({"server": {"chain_config": "nats://h:1"}}, tmp_path, ServerConfig())
    assert parsed.chain_config == "nats://h:1"
