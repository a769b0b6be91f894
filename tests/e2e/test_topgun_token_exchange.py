"""TopGun's token exchange driven by TopGun's real client (``tokenExchangeConfig``).

The client exchanges an external provider's token at ``POST /api/auth/token``, connects with
the server's token, and when that expires renews it at ``POST /api/auth/refresh`` and goes on
writing on a new ``AUTH``. Its refresh token survives a server restart; a spent one is refused
and revokes its family. Same harness as ``test_topgun_parity.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest

from octosync.server.auth import AuthConfig, ExchangeProvider
from octosync.server.topgun_state import topgun_state
from tests.e2e.helpers import serve
from tests.e2e.test_topgun_interop import SECRET, Client, start

pytestmark = pytest.mark.peer

IDP_SECRET = "the-external-providers-secret-of-32-bytes"
ISSUER = "https://idp.example"
AUTH = AuthConfig(
    hs256_secret=SECRET,
    providers={"idp": ExchangeProvider("idp", hs256_secret=IDP_SECRET, issuer=ISSUER)},
    roles={"writer": {"maps": {"users": frozenset({"read", "write"})}}},
    access_token_seconds=2,
)


def external_token(sub: str = "ann") -> str:
    claims = {"sub": sub, "roles": ["writer"], "iss": ISSUER, "exp": int(time.time()) + 600}
    return jwt.encode(claims, IDP_SECRET, "HS256")


def fetches(client: Client) -> list[tuple[str, int]]:
    return [(line["path"], line["status"]) for line in client.events("fetch")]


def auth_tokens(client: Client) -> list[str]:
    return [m["token"] for m in client.frames("out", "AUTH")]


async def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(base + path, json=body) as response:
        return response.status, await response.json()


async def test_exchange_refresh_across_expiry_and_restart_and_reuse_refused(
    tmp_path: Path, topgun_peer: tuple[str, Path]
) -> None:
    ours = ("--exchange", "idp")
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        first = await start(
            topgun_peer,
            srv.ws_url,
            *ours,
            "--external",
            external_token(),
            "writes",
            "a",
            "10",
            "400",
            seconds=14,
        )
        await first.end()
        written = set(topgun_state(srv.runtime).core.maps.live_items("users"))
    calls = fetches(first)
    assert calls[0] == ("/api/auth/token", 200)
    refreshes = [c for c in calls if c[0] == "/api/auth/refresh"]
    assert len(refreshes) >= 2
    assert all(status == 200 for _, status in refreshes)
    tokens = auth_tokens(first)
    assert len(set(tokens)) >= 3, "the client did not authenticate again with renewed tokens"
    assert len(first.frames("in", "AUTH_ACK")) >= 3
    assert {f"a-{i}" for i in range(10)} <= written
    (synced,) = first.events("synced")
    held = synced["refreshToken"]
    assert held

    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:  # restarted
        second = await start(
            topgun_peer,
            srv.ws_url,
            *ours,
            "--external",
            "-",
            "--refresh",
            held,
            "writes",
            "b",
            "2",
            "100",
            seconds=8,
        )
        await second.end()
        written = set(topgun_state(srv.runtime).core.maps.live_items("users"))
        assert fetches(second)[0] == ("/api/auth/refresh", 200)  # no external token needed
        assert ("/api/auth/token", 200) not in fetches(second)
        assert {"b-0", "b-1"} <= written
        (synced,) = second.events("synced")
        newest = synced["refreshToken"]

        status, body = await post(srv.url, "/api/auth/refresh", {"refreshToken": held})
        assert (status, body["name"], body["field"]) == (401, "RefreshTokenReused", "refreshToken")
        status, body = await post(srv.url, "/api/auth/refresh", {"refreshToken": newest})
        assert (status, body["name"]) == (401, "RefreshTokenRefused")
        assert "revoked" in body["message"]
