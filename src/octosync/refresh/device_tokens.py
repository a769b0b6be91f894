"""Device credentials of TopGun's clients, sans-I/O: which presented token re-binds which id.

A TopGun client keeps a server-issued ``deviceId`` and an opaque ``deviceToken`` in its
storage and presents the token on ``AUTH {token, deviceToken}`` or, token-less, on
``DEVICE_HELLO {deviceToken}``. The token is ``<deviceId>.<secret>``: a UUID and 32 random
bytes in hex, as TopGun's own server mints it. The server keeps only the secret's SHA-256,
under the pair (owner, deviceId), where the owner is the JWT's subject (``None``: the
anonymous ``--insecure-dev`` namespace).

A presented token re-binds its device id only when its secret's hash is the one kept for
that id *under the same owner*: another user's client presenting a copied token with its own
JWT, or an anonymous client presenting a user's token, gets a new identity instead, as with
TopGun. Binding never fails a connection (an attacker can always present no token): a token
that is absent, too long, malformed, unknown or whose secret does not match mints a new
identity, and a plain re-bind hands no new token back. The caller draws the randomness;
this module draws none and reads no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid

import msgspec

MAX_TOKEN = 128
"""Characters of a presented token past which it is not even parsed (a minted one has 101)."""
SECRET_BYTES = 32


class Claim(msgspec.Struct, frozen=True):
    """A well-formed presented token: the device id it names and its secret's hash."""

    device_id: str
    secret_hash: bytes


class Minted(msgspec.Struct, frozen=True):
    """A new identity: the token goes to the client once, only ``secret_hash`` is kept."""

    device_id: str
    token: str
    secret_hash: bytes


class Binding(msgspec.Struct, frozen=True):
    """What a connection is bound to; ``token`` is set only when a new one was minted."""

    device_id: str
    token: str | None = None


def owner_key(subject: str | None) -> str:
    """The owner column of a credential: tagged so no JWT subject can spell the anonymous
    namespace (``"n"``) or another subject (length-prefixed)."""
    return "n" if subject is None else f"a{len(subject)}:{subject}"


def hash_secret(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


def claim(presented: str | None) -> Claim | None:
    """The claim a presented token makes, or None when it cannot be one of ours."""
    if presented is None or len(presented) > MAX_TOKEN:
        return None
    device_id, dot, secret_hex = presented.partition(".")
    if not dot or len(secret_hex) != 2 * SECRET_BYTES:
        return None
    try:
        canonical = str(uuid.UUID(device_id))
        secret = bytes.fromhex(secret_hex)
    except ValueError:
        return None
    if canonical != device_id:  # one spelling per id: the one minted
        return None
    return Claim(device_id, hash_secret(secret))


def matches(kept: bytes | None, presented: Claim) -> bool:
    """The presented secret is the one kept for its id (compared in constant time)."""
    return kept is not None and hmac.compare_digest(kept, presented.secret_hash)


def mint(device_id: uuid.UUID, secret: bytes) -> Minted:
    """A new identity from the caller's randomness (``uuid4()``, ``token_bytes(32)``)."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a device secret is {SECRET_BYTES} bytes")
    did = str(device_id)
    return Minted(did, f"{did}.{secret.hex()}", hash_secret(secret))
