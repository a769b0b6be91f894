"""TopGun's real client keeps its server-issued device identity across a server restart.

The client's storage adapter keeps ``deviceId`` and ``deviceToken`` in its meta store; the
scenario's ``--meta FILE`` writes that store to a file, so a second client process is the same
client started again. Same harness as ``test_topgun_interop.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from octosync.server.auth import AuthConfig, issue_token
from octosync.server.topgun_state import topgun_state
from octosync.store.device_credentials import FILE_NAME, DeviceCredentials
from tests.e2e.helpers import serve
from tests.e2e.test_topgun_interop import SECRET, Client, start

pytestmark = pytest.mark.peer

AUTH = AuthConfig(hs256_secret=SECRET)
ALICE = issue_token(SECRET, "alice", {}, maps={"*": ["read", "write"]})
BOB = issue_token(SECRET, "bob", {}, maps={"*": ["read", "write"]})


async def _device(
    peer: tuple[str, Path], url: str, meta: Path, token: str | None = None
) -> tuple[dict[str, Any], Client]:
    client = await start(peer, url, "device", "--meta", str(meta), token=token, seconds=6)
    (device,) = [line for line in await client.end() if line.get("event") == "device"]
    return device, client


async def test_a_client_gets_its_device_id_back_after_a_server_restart(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    data, meta = tmp_path / "data", tmp_path / "alice.json"
    async with serve(data, insecure_dev=False, auth=AUTH) as srv:
        first, client = await _device(topgun_peer, srv.ws_url, meta, ALICE)
    (ack,) = client.frames("in", "AUTH_ACK")
    assert ack["userId"] == "alice"
    assert ack["deviceId"] == first["deviceId"]
    assert first["deviceToken"] == ack["deviceToken"]
    assert json.loads(meta.read_text())["deviceToken"] == first["deviceToken"]
    async with serve(data, insecure_dev=False, auth=AUTH) as srv:
        again, client = await _device(topgun_peer, srv.ws_url, meta, ALICE)
    assert again["deviceId"] == first["deviceId"]
    assert {a.get("deviceToken") for a in client.frames("out", "AUTH")} == {first["deviceToken"]}
    (ack,) = client.frames("in", "AUTH_ACK")
    assert ack["deviceId"] == first["deviceId"]
    assert "deviceToken" not in ack  # a plain re-bind hands no new credential out
    kept = DeviceCredentials(data)
    try:
        assert kept.devices("alice") == [first["deviceId"]]
        assert first["deviceToken"].encode() not in (data / FILE_NAME).read_bytes()
    finally:
        kept.close()


async def test_another_users_client_cannot_take_a_device_id_with_a_copied_token(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    alice_meta, bob_meta = tmp_path / "alice.json", tmp_path / "bob.json"
    async with serve(tmp_path / "data", insecure_dev=False, auth=AUTH) as srv:
        alice, _ = await _device(topgun_peer, srv.ws_url, alice_meta, ALICE)
        bob_meta.write_text(alice_meta.read_text())  # bob copied alice's stored credential
        bob, client = await _device(topgun_peer, srv.ws_url, bob_meta, BOB)
    assert bob["deviceId"] != alice["deviceId"]
    assert bob["deviceToken"] not in (None, alice["deviceToken"])
    (ack,) = client.frames("in", "AUTH_ACK")
    assert (ack["userId"], ack["deviceId"]) == ("bob", bob["deviceId"])


async def test_a_token_less_client_keeps_its_device_id_under_insecure_dev(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    data, meta = tmp_path / "data", tmp_path / "anon.json"
    async with serve(data) as srv:
        first, client = await _device(topgun_peer, srv.ws_url, meta)
    assert client.frames("out", "DEVICE_HELLO") == [{"type": "DEVICE_HELLO"}]
    async with serve(data) as srv:
        again, client = await _device(topgun_peer, srv.ws_url, meta)
    assert again["deviceId"] == first["deviceId"]
    (hello,) = client.frames("out", "DEVICE_HELLO")
    assert hello["deviceToken"] == first["deviceToken"]
    (ack,) = client.frames("in", "DEVICE_ACK")
    assert ack == {"type": "DEVICE_ACK", "deviceId": first["deviceId"]}


@pytest.mark.parametrize("stored", ["x" * 10_000, "not-a-device-token", "0" * 36 + "." + "0" * 64])
async def test_a_bad_stored_token_gets_a_new_identity_and_the_connection_serves(
    tmp_path: Path, topgun_peer: tuple[str, Path], stored: str
) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"deviceToken": stored}))
    async with serve(tmp_path / "data", insecure_dev=False, auth=AUTH) as srv:
        device, client = await _device(topgun_peer, srv.ws_url, meta, ALICE)
        writer = await start(topgun_peer, srv.ws_url, "ops", "put=u1=1", token=ALICE)
        await writer.until("synced")
        await writer.end()
    assert device["deviceToken"] not in (None, stored)
    assert client.frames("in", "ERROR") == []
    assert client.frames("in", "AUTH_FAIL") == []


async def test_a_credential_file_that_cannot_be_opened_leaves_the_client_served_without_an_id(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    data = tmp_path / "data"
    (data / FILE_NAME).mkdir(parents=True)  # SQLite cannot open a folder
    async with serve(data, insecure_dev=False, auth=AUTH) as srv:
        writer = await start(topgun_peer, srv.ws_url, "ops", "put=u1=1", token=ALICE)
        await writer.until("synced")
        await writer.end()
        users = topgun_state(srv.runtime).core.maps.live_items("users")
    (ack,) = writer.frames("in", "AUTH_ACK")
    assert ack["userId"] == "alice"
    assert "deviceId" not in ack
    assert list(users) == ["u1"]
