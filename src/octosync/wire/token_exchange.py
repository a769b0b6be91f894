"""TopGun's token exchange bodies (JSON): ``POST /api/auth/token`` and ``/api/auth/refresh``.

Shapes are those TopGun's client sends and reads (``BaseAuthProvider``: ``{token, provider}``,
``{refreshToken}``; answers ``{token, expiresAt, refreshToken, refreshExpiresAt}``). Decoding
is strict: unknown fields, wrong types and empty or oversized strings are a ``DecodeError``
naming the field.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

from octosync.errors import DecodeError

_T = TypeVar("_T")

MAX_BODY = 16 * 1024
"""Bytes of a request body (a JWT of a few KiB fits many times over)."""

Token = Annotated[str, msgspec.Meta(min_length=1)]
"""An external token: bounded by the body (``MAX_BODY``)."""
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Opaque = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class TokenRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    token: Token
    provider: Name | None = None


class RefreshRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    refresh_token: Opaque


class TokenResponse(msgspec.Struct, frozen=True, rename="camel"):
    token: str
    expires_at: int
    refresh_token: str
    refresh_expires_at: int


class ErrorBody(msgspec.Struct, frozen=True):
    """TopGun's ``{code, message, field}`` (``code`` the HTTP status) plus octosync's error
    ``name`` and its numeric ``error_code``."""

    code: int
    name: str
    error_code: int = msgspec.field(name="errorCode")
    message: str
    field: str | None = None


def decode_token_request(data: bytes) -> TokenRequest:
    return _decode(data, TokenRequest)


def decode_refresh_request(data: bytes) -> RefreshRequest:
    return _decode(data, RefreshRequest)


def _decode(data: bytes, kind: type[_T]) -> _T:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        field = str(exc).rpartition("at `$.")[2].rstrip("`") if "at `$." in str(exc) else None
        raise DecodeError(str(exc), path=field or "body") from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not JSON: {exc}", path="body") from None


def encode(body: TokenResponse | ErrorBody) -> bytes:
    return msgspec.json.encode(body)
