"""TopGun's token exchange over HTTP: ``POST /api/auth/token`` and ``POST /api/auth/refresh``.

TopGun's client (``BaseAuthProvider`` with ``tokenExchangeConfig``) exchanges an external
provider's token (Clerk, Firebase, ...) for the server's own JWT, then renews it with the
opaque refresh token it got alongside. The external token is verified by the provider named
in ``[auth.providers]`` (every provider in turn when the request names none, as TopGun's
server does); the issued token carries the external ``sub`` and ``roles`` (role policies:
``[auth.roles]``) and expires after ``access_token_seconds``. Refresh tokens rotate and a
reused one revokes its family (``refresh.rotation``); they are kept hashed in
``DATA/refresh_tokens.sqlite3`` (``store.refresh_grants``) on one worker thread, and a token
is answered only once it is committed. Errors are TopGun's ``{code, message, field}`` with
octosync's error name: 400 for a body that does not decode, 401 for a token refused, 404
when no provider is configured, 413 for a body past ``wire.token_exchange.MAX_BODY``, 503
when the grant could not be stored.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from aiohttp import web

from octosync.errors import (
    AuthError,
    ConfigError,
    DecodeError,
    FeatureDisabled,
    LimitExceeded,
    OctosyncError,
    StorageError,
    Unauthorized,
)
from octosync.refresh import rotation as rg
from octosync.server.auth import AuthConfig, external_identity, issue_access_token
from octosync.store.refresh_grants import RefreshGrants
from octosync.wire import token_exchange as tx

TOKEN_PATH = "/api/auth/token"
REFRESH_PATH = "/api/auth/refresh"

_T = TypeVar("_T")
EXCHANGE: web.AppKey[TokenExchange] = web.AppKey("token_exchange")
Handler = Callable[[web.Request], Awaitable[web.Response]]


def new_refresh_token() -> str:
    """32 random bytes, hex: the opaque token the client keeps (only its hash is stored)."""
    return secrets.token_hex(32)


class TokenExchange:
    """The two endpoints over one grant store, opened at start-up."""

    def __init__(
        self,
        auth: AuthConfig,
        data_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        new_token: Callable[[], str] = new_refresh_token,
    ) -> None:
        if auth.providers and auth.hs256_secret is None:
            raise ConfigError(
                "token exchange signs the tokens it issues with [auth] hs256_secret: set it",
                path="auth.providers",
            )
        self.auth = auth
        self.data_dir = data_dir
        self.clock = clock
        self.new_token = new_token
        self.grants: RefreshGrants | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="refresh-grants")

    async def open(self) -> None:
        if self.auth.providers:
            self.grants = await self._off(RefreshGrants, self.data_dir)

    async def close(self) -> None:
        if self.grants is not None:
            await self._off(self.grants.close)
            self.grants = None
        self._thread.shutdown(wait=False)

    def mount(self, app: web.Application) -> None:
        app[EXCHANGE] = self
        app.router.add_post(TOKEN_PATH, _answering(self.exchange))
        app.router.add_post(REFRESH_PATH, _answering(self.refresh))

        async def opened(_app: web.Application) -> None:
            await self.open()

        async def closed(_app: web.Application) -> None:
            await self.close()

        app.on_startup.append(opened)
        app.on_cleanup.append(closed)

    async def exchange(self, request: web.Request) -> tx.TokenResponse:
        grants = self._store()
        body = tx.decode_token_request(await _body(request))
        providers = self.auth.providers
        if body.provider is not None and body.provider not in providers:
            names = ", ".join(sorted(providers))
            raise DecodeError(
                f"unknown provider {body.provider!r} (known: {names})", path="provider"
            )
        named = [providers[body.provider]] if body.provider else list(providers.values())
        refusals: list[Unauthorized] = []
        for provider in named:
            try:
                subject, roles = external_identity(body.token, provider)
                break
            except Unauthorized as err:
                refusals.append(err)
        else:
            if len(refusals) == 1:
                raise refusals[0]
            raise Unauthorized("; ".join(e.message for e in refusals), path="token")
        now = self.clock()
        raw = self.new_token()
        grant = rg.start_family(subject, roles, raw, now, self.auth.refresh_token_seconds)
        await self._off(grants.insert, grant, now)  # StorageError: no token is answered
        return self._answer(subject, roles, raw, grant, now)

    async def refresh(self, request: web.Request) -> tx.TokenResponse:
        grants = self._store()
        body = tx.decode_refresh_request(await _body(request))
        now = self.clock()
        raw = self.new_token()
        lifetime = self.auth.refresh_token_seconds
        grant = await self._off(grants.refresh, body.refresh_token, raw, now, lifetime)
        return self._answer(grant.subject, grant.roles, raw, grant, now)

    def _answer(
        self, subject: str, roles: tuple[str, ...], raw: str, grant: rg.Grant, now: float
    ) -> tx.TokenResponse:
        token, expires = issue_access_token(self.auth, subject, roles, now)
        return tx.TokenResponse(token, expires, raw, int(grant.expires_at))

    def _store(self) -> RefreshGrants:
        if self.grants is None:
            raise FeatureDisabled("token exchange is not configured ([auth.providers])")
        return self.grants

    async def _off(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)


async def _body(request: web.Request) -> bytes:
    limit = tx.MAX_BODY
    if request.content_length is not None and request.content_length > limit:
        raise LimitExceeded(f"a token request is at most {limit} bytes", path="body")
    data = await request.content.read(limit + 1)
    if len(data) > limit:
        raise LimitExceeded(f"a token request is at most {limit} bytes", path="body")
    return data


def status_of(err: OctosyncError) -> int:
    if isinstance(err, AuthError):
        return 401
    if isinstance(err, FeatureDisabled):
        return 404
    if isinstance(err, LimitExceeded):
        return 413
    if isinstance(err, StorageError):
        return 503
    return 400


def _answering(serve: Callable[[web.Request], Awaitable[tx.TokenResponse]]) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        try:
            body: tx.TokenResponse | tx.ErrorBody = await serve(request)
            status = 200
        except OctosyncError as err:
            status = status_of(err)
            body = tx.ErrorBody(status, err.name, err.code, err.message, err.path)
        return web.Response(status=status, body=tx.encode(body), content_type="application/json")

    return handle
