"""``POST /api/auth/token`` and ``/api/auth/refresh`` over a real socket: what is issued, and
every bad request refused with its status and a JSON body naming what was wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest

from octosync.server.auth import AuthConfig, ExchangeProvider, authenticate
from octosync.server.token_exchange import EXCHANGE, REFRESH_PATH, TOKEN_PATH
from octosync.wire.token_exchange import MAX_BODY
from tests.e2e.helpers import serve

SECRET = "the-servers-own-secret-of-32-bytes-or-more"
IDP = "the-identity-providers-secret-of-32-bytes"
AUTH = AuthConfig(
    hs256_secret=SECRET,
    audience="octosync",
    providers={
        "idp": ExchangeProvider("idp", hs256_secret=IDP, issuer="https://idp", audience="app"),
        "other": ExchangeProvider("other", hs256_secret="another-secret-of-32-bytes-or-more"),
    },
    roles={"editor": {"maps": {"docs": frozenset({"read", "write"})}}},
    access_token_seconds=120,
)


def external(**claims: Any) -> str:
    base = {"sub": "ann", "iss": "https://idp", "aud": "app", "exp": int(time.time()) + 600}
    return jwt.encode({**base, **claims}, claims.pop("key", IDP), "HS256")


async def post(base: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + path, data=body, headers=headers) as r,
    ):
        return r.status, await r.json()


def js(value: Any) -> bytes:
    import json

    return json.dumps(value).encode()


async def test_an_exchanged_token_carries_sub_and_roles_and_refreshes(tmp_path: Path) -> None:
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        before = time.time()
        status, body = await post(
            srv.url, TOKEN_PATH, js({"token": external(roles=["editor"]), "provider": "idp"})
        )
        assert status == 200
        identity = authenticate(body["token"], AUTH)
        assert identity.subject == "ann"
        assert identity.may_map("docs", "write")
        assert not identity.may_map("other", "read")
        assert before + 120 - 1 <= body["expiresAt"] <= time.time() + 120
        assert identity.expires_at == body["expiresAt"]
        first = body["refreshToken"]
        assert len(first) == 64
        status, body = await post(srv.url, REFRESH_PATH, js({"refreshToken": first}))
        assert status == 200
        assert body["refreshToken"] != first
        assert authenticate(body["token"], AUTH).may_map("docs", "write")
        # no provider named: each configured one is tried, as TopGun's server does
        status, _ = await post(srv.url, TOKEN_PATH, js({"token": external()}))
        assert status == 200


BAD: list[tuple[Callable[[], bytes], int, str, str]] = [
    # bodies made when the test runs: a token minted at collection would expire in a long run
    (lambda: b"{", 400, "DecodeError", "body"),
    (lambda: b"[]", 400, "DecodeError", "body"),
    (lambda: js({"token": "x", "extra": 1}), 400, "DecodeError", "body"),
    (lambda: js({"token": ""}), 400, "DecodeError", "token"),
    (lambda: js({"token": 5}), 400, "DecodeError", "token"),
    (lambda: js({"provider": "idp"}), 400, "DecodeError", "body"),
    (lambda: js({"token": "x", "provider": "nobody"}), 400, "DecodeError", "provider"),
    (lambda: js({"token": "not.a.jwt", "provider": "idp"}), 401, "Unauthorized", "token"),
    (
        lambda: js({"token": external(key="a-wrong-secret-of-32-bytes-or-more!!")}),
        401,
        "Unauthorized",
        "token",
    ),
    (
        lambda: js({"token": external(iss="https://evil"), "provider": "idp"}),
        401,
        "Unauthorized",
        "token",
    ),
    (
        lambda: js({"token": external(aud="elsewhere"), "provider": "idp"}),
        401,
        "Unauthorized",
        "token",
    ),
    (lambda: js({"token": external(exp=1), "provider": "idp"}), 401, "Unauthorized", "token"),
    (
        lambda: js({"token": external(roles="admin"), "provider": "idp"}),
        401,
        "Unauthorized",
        "token.roles",
    ),
    (lambda: js({"token": "x" * (MAX_BODY + 1)}), 413, "LimitExceeded", "body"),
]


@pytest.mark.parametrize(("body", "status", "name", "field"), BAD)
async def test_bad_exchanges_are_refused_naming_what_was_wrong(
    tmp_path: Path, body: Callable[[], bytes], status: int, name: str, field: str
) -> None:
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        got, answer = await post(srv.url, TOKEN_PATH, body())
        assert (got, answer["code"], answer["name"], answer["field"]) == (
            status,
            status,
            name,
            field,
        )
        assert answer["message"]
        # the server goes on serving others
        ok, _ = await post(srv.url, TOKEN_PATH, js({"token": external(), "provider": "idp"}))
        assert ok == 200


@pytest.mark.parametrize(
    ("body", "status", "name"),
    [
        (js({"refreshToken": "0" * 64}), 401, "RefreshTokenRefused"),
        (js({"refreshToken": ""}), 400, "DecodeError"),
        (js({"refresh_token": "x"}), 400, "DecodeError"),
        (js({"refreshToken": "x" * 300}), 400, "DecodeError"),
    ],
)
async def test_bad_refreshes_are_refused(
    tmp_path: Path, body: bytes, status: int, name: str
) -> None:
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        got, answer = await post(srv.url, REFRESH_PATH, body)
        assert (got, answer["name"]) == (status, name)


async def test_without_providers_both_endpoints_are_not_found(tmp_path: Path) -> None:
    async with serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=SECRET)) as srv:
        for path, body in ((TOKEN_PATH, {"token": "x"}), (REFRESH_PATH, {"refreshToken": "x"})):
            status, answer = await post(srv.url, path, js(body))
            assert (status, answer["name"]) == (404, "FeatureDisabled")


async def test_a_grant_that_cannot_be_stored_issues_no_token(tmp_path: Path) -> None:
    async with serve(tmp_path, insecure_dev=False, auth=AUTH) as srv:
        status, _ = await post(srv.url, TOKEN_PATH, js({"token": external(), "provider": "idp"}))
        assert status == 200
        grants = srv.runner.app[EXCHANGE].grants
        assert grants is not None
        pages = grants._db.execute("PRAGMA page_count").fetchone()[0]
        grants._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
        big = external(roles=[f"role-{i}-" + "x" * 100 for i in range(64)])
        status, answer = await post(srv.url, TOKEN_PATH, js({"token": big, "provider": "idp"}))
        assert (status, answer["name"]) == (503, "StorageError")
        assert "token" not in answer
