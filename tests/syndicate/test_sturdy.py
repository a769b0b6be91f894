"""Sturdy refs: the signature chain of ``sturdy.prs``, attenuation without the secret."""

from __future__ import annotations

import hashlib
import hmac

import preserves
from hypothesis import given
from hypothesis import strategies as st

from octosync.syndicate.sturdy import attenuate, mint, mint_text, signature, verify

SECRET = b"s" * 32
REJECT_ALL = preserves.parse("<reject <_>>")


def f(key: bytes, value: object) -> bytes:
    """The definition, written out: HMAC-BLAKE2s-256 of the canonical bytes, first 16."""
    data = preserves.canonicalize(value)
    return hmac.new(key, data, hashlib.blake2s).digest()[:16]


def test_the_signature_is_the_hmac_chain_over_oid_then_caveats() -> None:
    caveat = preserves.parse("<rewrite <_> <lit 1>>")
    assert signature(SECRET, "demo") == f(SECRET, "demo")
    assert signature(SECRET, "demo", [REJECT_ALL, caveat]) == f(
        f(f(SECRET, "demo"), REJECT_ALL), caveat
    )


def test_minted_text_parses_back_to_a_verifiable_ref() -> None:
    ref = preserves.parse(mint_text(SECRET, "room-1"))
    params = ref.fields[0]
    assert ref.key == preserves.Symbol("ref")
    assert verify(SECRET, params[preserves.Symbol("oid")], params[preserves.Symbol("sig")], ())


@given(st.text(max_size=10), st.lists(st.integers(), max_size=3))
def test_attenuating_needs_no_secret_and_verifies(name: str, literals: list[int]) -> None:
    caveats = [
        preserves.Record(
            preserves.Symbol("reject"), [preserves.Record(preserves.Symbol("lit"), [n])]
        )
        for n in literals
    ]
    ref = attenuate(mint(SECRET, name), caveats)
    params = ref.fields[0]
    got = tuple(params.get(preserves.Symbol("caveats"), ()))
    sig = params[preserves.Symbol("sig")]
    assert verify(SECRET, name, sig, got)
    assert not verify(b"t" * 32, name, sig, got)
    assert not verify(SECRET, name + "x", sig, got)
    if caveats:
        assert not verify(SECRET, name, sig, got[:-1])


def test_non_bytes_or_unsignable_input_does_not_verify() -> None:
    assert not verify(SECRET, "demo", "not bytes", ())
    assert not verify(SECRET, preserves.Embedded(1), signature(SECRET, "demo"), ())
