"""Sturdy refs (``sturdy.prs``): ``<ref {oid: Name, sig: #[...], caveats: [...]}>``.

``f(k, d) = HMAC-BLAKE2s-256(k, d)[0..16)``; the signature is ``f(... f(f(k, e(oid)),
e(caveat1)) ..., e(caveatN))`` where ``e`` is Preserves' canonical binary form, so anyone
holding a ref can add caveats (and re-sign from the old signature) but no one can remove one.
The server's secret ``k`` signs every dataspace name; the OID of a ref is the name (a string).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

import preserves

from octosync.errors import DecodeError

SIG_BYTES = 16
REF = preserves.Symbol("ref")
OID = preserves.Symbol("oid")
SIG = preserves.Symbol("sig")
CAVEATS = preserves.Symbol("caveats")


def _f(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.blake2s).digest()[:SIG_BYTES]


def _canonical(v: Any) -> bytes:
    try:
        return bytes(preserves.canonicalize(v))
    except TypeError as exc:  # an embedded value, which no signature can cover
        raise DecodeError(f"cannot sign {v!r}: {exc}", path="ref") from None


def signature(secret: bytes, oid: Any, caveats: Sequence[Any] = ()) -> bytes:
    """The signature of a ref to ``oid`` carrying ``caveats`` (Preserves wire values)."""
    sig = _f(secret, _canonical(oid))
    for caveat in caveats:
        sig = _f(sig, _canonical(caveat))
    return sig


def attenuate(ref: Any, caveats: Sequence[Any]) -> Any:
    """``ref`` with ``caveats`` appended and its signature extended (no secret needed)."""
    params = dict(ref.fields[0])
    sig = params[SIG]
    for caveat in caveats:
        sig = _f(sig, _canonical(caveat))
    params[SIG] = sig
    params[CAVEATS] = (*params.get(CAVEATS, ()), *caveats)
    return preserves.Record(REF, [preserves.ImmutableDict(params)])


def mint(secret: bytes, name: str, caveats: Sequence[Any] = ()) -> Any:
    """A sturdy ref to dataspace ``name``, as a Preserves value."""
    params: dict[Any, Any] = {OID: name, SIG: signature(secret, name, caveats)}
    if caveats:
        params[CAVEATS] = tuple(caveats)
    return preserves.Record(REF, [preserves.ImmutableDict(params)])


def mint_text(secret: bytes, name: str) -> str:
    """What ``octosync dataspace mint NAME`` prints: the ref in Preserves text."""
    return str(preserves.stringify(mint(secret, name)))


def verify(secret: bytes, oid: Any, sig: Any, caveats: Sequence[Any]) -> bool:
    """Whether ``sig`` is the signature of ``oid`` with ``caveats`` under ``secret``."""
    if type(sig) is not bytes:
        return False
    try:
        expected = signature(secret, oid, caveats)
    except DecodeError:
        return False
    return hmac.compare_digest(expected, sig)
