"""Refresh tokens of TopGun's token exchange, sans-I/O: which presented token is honoured.

``POST /api/auth/token`` starts a *family* (one per exchange of an external token);
``POST /api/auth/refresh`` spends the family's newest token and issues the next one. A token
is single-use: presenting one that was spent means two parties hold it (the client that
spent it, and whoever copied it), so the server cannot tell which is the owner and revokes
the whole family, the newest token included (refresh-token rotation with reuse detection).

Only a token's SHA-256 is ever kept (``hash_token``), so the store leaks no usable token.
The raw tokens and the clock come from the caller: this module draws no randomness and reads
no time. The store (``store.refresh_grants``) applies a ``Rotate`` atomically, spending the
old grant only if it is still unspent, so two concurrent presentations cannot both win.
"""

from __future__ import annotations

import hashlib

import msgspec

from octosync.errors import RefreshTokenRefused


class Grant(msgspec.Struct, frozen=True):
    """One issued refresh token, by its hash: whom it stands for and until when."""

    token_hash: str
    family: str
    """The hash of the family's first token: every rotation of one exchange shares it."""
    subject: str
    roles: tuple[str, ...]
    expires_at: float
    """Unix seconds after which the token is refused."""
    spent: bool = False
    revoked: bool = False


class Rotate(msgspec.Struct, frozen=True):
    """Spend ``spent`` (the presented token's hash) and keep ``grant`` in its place."""

    spent: str
    grant: Grant


class Reuse(msgspec.Struct, frozen=True):
    """A spent token came back: revoke ``family``, then refuse."""

    family: str


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def start_family(
    subject: str, roles: tuple[str, ...], raw: str, now: float, lifetime: float
) -> Grant:
    """The first grant of a new family, for the refresh token ``raw``."""
    digest = hash_token(raw)
    return Grant(digest, digest, subject, roles, now + lifetime)


def redeem(found: Grant | None, raw_next: str, now: float, lifetime: float) -> Rotate | Reuse:
    """What presenting a token whose stored grant is ``found`` (None: not held) does:
    rotate to ``raw_next``, or revoke its family; a token the server cannot honour otherwise
    is ``RefreshTokenRefused``."""
    if found is None:
        raise RefreshTokenRefused("unknown refresh token", path="refreshToken")
    if now >= found.expires_at:  # spent or not: useless to anyone, so nothing is revoked
        raise RefreshTokenRefused("the refresh token expired", path="refreshToken")
    if found.revoked:
        raise RefreshTokenRefused("the refresh token was revoked", path="refreshToken")
    if found.spent:
        return Reuse(found.family)
    nxt = Grant(hash_token(raw_next), found.family, found.subject, found.roles, now + lifetime)
    return Rotate(found.token_hash, nxt)
