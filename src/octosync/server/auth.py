"""JWT authentication: who a connection is, what it may do, and until when.

Tokens are HS256 (shared secret) or RS256 (public key) JWTs, checked once at the HTTP upgrade
(``Authorization: Bearer`` or ``?token=``; plain TCP peers send feature ``auth:<jwt>``). Claims::

    {"sub": "alice",
     "streams": {"scoreboard": ["read", "publish"], "*": ["read"], "$global": ["publish"]},
     "rooms": {"lobby": ["join"]},
     "maps": {"users": ["read", "write"], "*": ["read"]},
     "topics": {"chat/room-1": ["subscribe", "publish"]},
     "locks": {"resource-1": ["acquire"]},
     "counters": {"likes:post-1": ["read", "write"]},
     "nodes": {"game": {"read": ["board/*"], "write": ["players/alice/*"]}},
     "peer": 7,
     "exp": 1767225600}

``nodes`` narrows a lazily stream's grants to nodes of the producer's graph, by key pattern
(``hub.node_views``): ``read`` filters what the connection is sent, ``write`` and
``trigger_effect`` what it may ask of the producer. ``maps``, ``topics``, ``locks`` and
``counters`` are the TopGun face's grants (``/topgun``), by map, topic, lock and counter name.
A token may also name ``roles`` (as TopGun's tokens do:
``{"sub": "alice", "roles": ["editor"]}``): each role the server defines (``[auth.roles]``)
adds its tables to the token's own. ``*`` applies to every stream (or room, map, ...) without
its own entry, except names starting with ``$`` (``$global``: WVP notifications to
everyone), which only an explicit entry grants. ``peer`` binds signaling joins to one peer
id in allowlist mode (default: ``sub`` read as an integer). ``exp`` is enforced on open
connections, not only at the upgrade. With ``--insecure-dev`` a
connection without a token may do everything; a token that is presented is still verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import jwt

from octosync.errors import Unauthorized
from octosync.hub.node_views import MAX_PATTERNS, NODE_KINDS, NodeRules
from octosync.hub.types import Action, StreamId
from octosync.server.face_names import (
    CLAIM_TABLES,
    COUNTERS,
    LOCKS,
    MAPS,
    ROOMS,
    STREAMS,
    TOPICS,
    GrantTable,
)

Tables = Mapping[str, Mapping[str, frozenset[str]]]


@dataclass(frozen=True)
class ClaimGrants:
    """A connection's identity: the hub asks it ``allows(stream, action)``, other cores
    ``may(table, name, action)`` (or the ``may_*`` words their own protocols use)."""

    subject: str
    tables: Tables = field(default_factory=dict)
    """Claim name -> (name -> granted actions), one entry per ``GrantTable``."""
    peer: int | None = None
    """The signaling peer id this identity may join as (allowlist mode); None: any."""
    expires_at: float | None = None
    """Unix time after which the connection is closed (the token's ``exp``)."""
    everything: bool = False
    """Anonymous ``--insecure-dev`` access: every action everywhere."""
    nodes: Mapping[str, NodeRules] = field(default_factory=dict)
    """Stream -> the nodes of it this identity may read, write and trigger (``*``: any
    stream without its own entry); a stream not named keeps its stream grant whole."""

    @classmethod
    def of(
        cls,
        subject: str,
        *,
        peer: int | None = None,
        expires_at: float | None = None,
        **tables: Mapping[str, frozenset[str]],
    ) -> ClaimGrants:
        """Grants spelled by table: ``ClaimGrants.of("r", streams={"s": frozenset({"read"})})``."""
        known = {t.claim for t in CLAIM_TABLES}
        unknown = sorted(set(tables) - known)
        if unknown:
            raise TypeError(f"no grant table named {unknown}")
        return cls(subject, tables, peer=peer, expires_at=expires_at)

    def may(self, table: GrantTable, name: str, action: str) -> bool:
        return self.everything or action in _lookup(self.tables.get(table.claim, {}), name)

    def allows(self, stream: StreamId, action: Action) -> bool:
        return self.may(STREAMS, str(stream), action)

    def node_rules(self, stream: StreamId) -> NodeRules | None:
        if self.everything or not self.nodes:
            return None
        name = str(stream)
        rules = self.nodes.get(name)
        if rules is None and not name.startswith("$"):
            rules = self.nodes.get("*")
        return rules

    def may_join(self, room: str) -> bool:
        return self.may(ROOMS, room, "join")

    def may_map(self, name: str, action: str) -> bool:
        return self.may(MAPS, name, action)

    def may_topic(self, name: str, action: str) -> bool:
        return self.may(TOPICS, name, action)

    def may_lock(self, name: str) -> bool:
        return self.may(LOCKS, name, "acquire")

    def may_counter(self, name: str, action: str) -> bool:
        return self.may(COUNTERS, name, action)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


ANONYMOUS_DEV = ClaimGrants(subject="", everything=True)


def _lookup(table: Mapping[str, frozenset[str]], name: str) -> frozenset[str]:
    granted = table.get(name)
    if granted is None and not name.startswith("$"):
        granted = table.get("*")
    return granted or frozenset()


Roles = Mapping[str, Tables]
"""Role name -> the grant tables a token naming that role in its ``roles`` claim gets."""


@dataclass(frozen=True)
class ExchangeProvider:
    """An external identity provider whose tokens ``POST /api/auth/token`` exchanges for the
    server's own (TopGun's token exchange): how its tokens are verified."""

    name: str
    hs256_secret: str | None = None
    rs256_public_key: str | None = None
    issuer: str | None = None
    """Required ``iss`` claim; None: not checked."""
    audience: str | None = None
    """Required ``aud`` claim; None: not checked."""


@dataclass(frozen=True)
class AuthConfig:
    hs256_secret: str | None = None
    rs256_public_key: str | None = None
    audience: str | None = None
    insecure_dev: bool = False
    roles: Roles = field(default_factory=dict)
    """TopGun-style role policies: a token ``{"sub", "roles": ["editor"]}`` gets the tables
    of each role it names, added to its own."""
    providers: Mapping[str, ExchangeProvider] = field(default_factory=dict)
    """External providers whose tokens are exchanged for the server's (``[auth.providers]``)."""
    access_token_seconds: int = 3600
    """Lifetime of an access token issued by the token exchange or a refresh."""
    refresh_token_seconds: int = 30 * 86_400
    """Lifetime of a refresh token (each refresh issues a new one with a new lifetime)."""

    @property
    def configured(self) -> bool:
        return self.hs256_secret is not None or self.rs256_public_key is not None


def _table(
    claims: Mapping[str, object], claim: str, allowed: frozenset[str]
) -> dict[str, frozenset[str]]:
    raw = claims.get(claim, {})
    if not isinstance(raw, dict):
        raise Unauthorized(f"claim {claim!r} must be a map of name -> actions", path=claim)
    table: dict[str, frozenset[str]] = {}
    for name, actions in raw.items():
        if not isinstance(actions, list) or not all(a in allowed for a in actions):
            raise Unauthorized(
                f"actions must be a list drawn from {sorted(allowed)}", path=f"{claim}.{name}"
            )
        table[str(name)] = frozenset(actions)
    return table


def _node_rules(claims: Mapping[str, object]) -> dict[str, NodeRules]:
    raw = claims.get("nodes", {})
    if not isinstance(raw, dict):
        raise Unauthorized(
            "claim 'nodes' must be a map of stream -> {kind: [patterns]}", path="nodes"
        )
    out: dict[str, NodeRules] = {}
    for stream, kinds in raw.items():
        path = f"nodes.{stream}"
        if not isinstance(kinds, dict) or not set(kinds) <= set(NODE_KINDS):
            raise Unauthorized(f"expected a map with keys drawn from {list(NODE_KINDS)}", path=path)
        patterns: dict[str, tuple[str, ...]] = {}
        for kind, listed in kinds.items():
            if not _names(listed, MAX_PATTERNS, 1024):
                raise Unauthorized(
                    f"expected a list of at most {MAX_PATTERNS} non-empty patterns",
                    path=f"{path}.{kind}",
                )
            patterns[kind] = tuple(listed)
        out[str(stream)] = NodeRules(**patterns)
    return out


def _names(value: object, most: int, longest: int) -> bool:
    """A claim's list of names: at most ``most``, each a non-empty string of at most
    ``longest`` characters."""
    return (
        isinstance(value, list)
        and len(value) <= most
        and all(isinstance(v, str) and 0 < len(v) <= longest for v in value)
    )


def _peer(claims: Mapping[str, object]) -> int | None:
    peer = claims.get("peer")
    if peer is None:
        sub = claims.get("sub")
        return int(sub) if isinstance(sub, str) and sub.isdigit() else None
    if type(peer) is not int or not 0 <= peer <= 2**53:
        raise Unauthorized("claim 'peer' must be an integer peer id", path="peer")
    return peer


def role_tables(value: object, path: str) -> Tables:
    """One role's grant tables, checked as a token's claims are (``{"maps": {"*": [...]}}``)."""
    if not isinstance(value, dict):
        raise Unauthorized("a role maps claim names to tables", path=path)
    known = {t.claim: t for t in CLAIM_TABLES}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise Unauthorized(f"no grant table named {unknown}", path=path)
    return {claim: _table(value, claim, known[claim].actions) for claim in value}


def _with_roles(
    tables: dict[str, dict[str, frozenset[str]]], claims: Mapping[str, object], roles: Roles
) -> None:
    named = claims.get("roles", [])
    if not isinstance(named, list) or not all(isinstance(r, str) for r in named):
        raise Unauthorized("claim 'roles' must be a list of role names", path="roles")
    for role in named:
        for claim, table in roles.get(role, {}).items():
            mine = tables.setdefault(claim, {})
            for name, actions in table.items():
                mine[name] = mine.get(name, frozenset()) | actions


def grants_from_claims(claims: Mapping[str, object], roles: Roles | None = None) -> ClaimGrants:
    """The grants of a token's claims; with ``roles``, each role the ``roles`` claim names
    adds its tables (a role the server does not define adds nothing)."""
    exp = claims.get("exp")
    tables = {t.claim: _table(claims, t.claim, t.actions) for t in CLAIM_TABLES}
    if roles:
        _with_roles(tables, claims, roles)
    return ClaimGrants(
        subject=str(claims.get("sub", "")),
        tables=tables,
        peer=_peer(claims),
        expires_at=float(exp) if isinstance(exp, int | float) else None,
        nodes=_node_rules(claims),
    )


def authenticate(token: str | None, config: AuthConfig) -> ClaimGrants:
    """The identity presenting ``token`` (None: no token); ``Unauthorized`` if there is none."""
    if token is None:
        if config.insecure_dev:
            return ANONYMOUS_DEV
        raise Unauthorized("a bearer token is required (or run the server with --insecure-dev)")
    if not config.configured:
        if config.insecure_dev:
            return ANONYMOUS_DEV
        raise Unauthorized("the server has no JWT key configured")
    key, algorithm = _verifier(config.hs256_secret, config.rs256_public_key)
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
    return grants_from_claims(claims, config.roles)


def _verifier(hs256_secret: str | None, rs256_public_key: str | None) -> tuple[str, str]:
    """The key and algorithm a token is checked with: the shared secret when there is one,
    else the public key."""
    if hs256_secret is not None:
        return hs256_secret, "HS256"
    return rs256_public_key or "", "RS256"


def external_identity(token: str, provider: ExchangeProvider) -> tuple[str, tuple[str, ...]]:
    """The subject and roles of an external provider's token, verified by ``provider``'s key,
    issuer and audience; ``Unauthorized`` naming what failed."""
    key, algorithm = _verifier(provider.hs256_secret, provider.rs256_public_key)
    required = ["sub", "exp", *(["iss"] if provider.issuer is not None else [])]
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=provider.audience,
            issuer=provider.issuer,
            options={"require": required, "verify_aud": provider.audience is not None},
        )
    except jwt.PyJWTError as exc:
        raise Unauthorized(
            f"provider {provider.name!r} refused the token: {exc}", path="token"
        ) from exc
    sub = claims["sub"]
    roles = claims.get("roles", [])
    if not isinstance(sub, str) or not sub:
        raise Unauthorized("claim 'sub' must be a non-empty string", path="token.sub")
    if not _names(roles, MAX_EXCHANGED_ROLES, 256):
        raise Unauthorized(
            f"claim 'roles' must be a list of at most {MAX_EXCHANGED_ROLES} role names",
            path="token.roles",
        )
    return sub, tuple(dict.fromkeys(roles))


MAX_EXCHANGED_ROLES = 64


def issue_access_token(
    config: AuthConfig, subject: str, roles: tuple[str, ...], now: float
) -> tuple[str, int]:
    """The server's own HS256 token for ``subject`` with ``roles`` (TopGun's ``{sub, roles,
    exp, iat}``, plus ``aud`` when the server requires one) and its expiry."""
    if config.hs256_secret is None:
        raise Unauthorized("the server has no HS256 secret to sign tokens with")
    iat = int(now)
    exp = iat + config.access_token_seconds
    claims: dict[str, object] = {"sub": subject, "roles": list(roles), "iat": iat, "exp": exp}
    if config.audience is not None:
        claims["aud"] = config.audience
    return jwt.encode(claims, config.hs256_secret, "HS256"), exp


def bearer_token(authorization: str | None, query_token: str | None) -> str | None:
    """The token of an HTTP request: ``?token=`` (browsers) or ``Authorization: Bearer``."""
    if query_token:
        return query_token
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


def issue_token(
    secret: str, subject: str, streams: Mapping[str, list[str]], **extra: object
) -> str:
    """An HS256 token (for tests, examples and the ``octosync token`` helper)."""
    return jwt.encode({"sub": subject, "streams": dict(streams), **extra}, secret, "HS256")
