"""JWT authentication: who a connection is and which streams it may read, publish or write.

Tokens are HS256 (shared secret) or RS256 (public key) JWTs. Claims grant per-stream actions::

    {"sub": "alice", "streams": {"scoreboard": ["read", "publish"], "*": ["read"]}}

``*`` applies to every stream without its own entry. With ``--insecure-dev`` a connection
without a token gets every grant; a token that is presented is still verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import jwt

from octosync.errors import Unauthorized
from octosync.hub import AllowAll, Grants
from octosync.hub.core import Action, StreamId

ACTIONS = frozenset({"read", "publish", "write"})


@dataclass(frozen=True)
class ClaimGrants:
    subject: str
    streams: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def allows(self, stream: StreamId, action: Action) -> bool:
        granted = self.streams.get(str(stream))
        if granted is None:
            granted = self.streams.get("*", frozenset())
        return action in granted


@dataclass(frozen=True)
class AuthConfig:
    hs256_secret: str | None = None
    rs256_public_key: str | None = None
    audience: str | None = None
    insecure_dev: bool = False

    @property
    def configured(self) -> bool:
        return self.hs256_secret is not None or self.rs256_public_key is not None


def _grants_from_claims(claims: Mapping[str, object]) -> ClaimGrants:
    raw = claims.get("streams", {})
    if not isinstance(raw, dict):
        raise Unauthorized("claim 'streams' must be a map of stream -> actions", path="streams")
    streams: dict[str, frozenset[str]] = {}
    for name, actions in raw.items():
        if not isinstance(actions, list) or not all(a in ACTIONS for a in actions):
            raise Unauthorized(
                f"actions must be a list drawn from {sorted(ACTIONS)}", path=f"streams.{name}"
            )
        streams[str(name)] = frozenset(actions)
    return ClaimGrants(str(claims.get("sub", "")), streams)


def authenticate(token: str | None, config: AuthConfig) -> Grants:
    """Grants for a connection presenting ``token`` (None: no token); ``Unauthorized`` if not."""
    if token is None:
        if config.insecure_dev:
            return AllowAll()
        raise Unauthorized("a bearer token is required (or run the server with --insecure-dev)")
    if not config.configured:
        if config.insecure_dev:
            return AllowAll()
        raise Unauthorized("the server has no JWT key configured")
    key, algorithm = (
        (config.hs256_secret, "HS256")
        if config.hs256_secret is not None
        else (config.rs256_public_key or "", "RS256")
    )
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=config.audience,
            options={"require": ["sub"], "verify_aud": config.audience is not None},
        )
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"invalid token: {exc}") from exc
    return _grants_from_claims(claims)


def issue_token(
    secret: str, subject: str, streams: Mapping[str, list[str]], **extra: object
) -> str:
    """An HS256 token (for tests, examples and the ``octosync token`` helper)."""
    return jwt.encode({"sub": subject, "streams": dict(streams), **extra}, secret, "HS256")
