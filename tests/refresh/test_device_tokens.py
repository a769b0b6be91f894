"""Device tokens, sans-I/O: what a presented token claims, and owners no subject can spell."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.refresh.device_tokens import (
    MAX_TOKEN,
    SECRET_BYTES,
    claim,
    matches,
    mint,
    owner_key,
)

uuids = st.uuids()
secrets = st.binary(min_size=SECRET_BYTES, max_size=SECRET_BYTES)


@given(uuids, secrets)
def test_a_minted_token_claims_its_own_id_and_secret(device: uuid.UUID, secret: bytes) -> None:
    minted = mint(device, secret)
    assert len(minted.token) <= MAX_TOKEN
    found = claim(minted.token)
    assert found is not None
    assert found.device_id == str(device)
    assert found.secret_hash == hashlib.sha256(secret).digest() == minted.secret_hash
    assert secret.hex() not in minted.secret_hash.hex()
    assert matches(minted.secret_hash, found)


@given(uuids, secrets, secrets)
def test_another_secret_for_the_same_id_does_not_match(
    device: uuid.UUID, secret: bytes, other: bytes
) -> None:
    kept = mint(device, secret).secret_hash
    found = claim(mint(device, other).token)
    assert found is not None
    assert matches(kept, found) == (secret == other)
    assert not matches(None, found)


@given(st.text(max_size=300))
def test_any_text_is_a_claim_or_none_and_never_an_error(text: str) -> None:
    found = claim(text)
    if found is not None:
        assert len(text) <= MAX_TOKEN
        assert str(uuid.UUID(found.device_id)) == found.device_id
        assert text.startswith(found.device_id + ".")


@given(uuids, secrets)
def test_other_spellings_of_a_token_claim_nothing(device: uuid.UUID, secret: bytes) -> None:
    token = mint(device, secret).token
    did, _, hexed = token.partition(".")
    for spelled in (
        did.upper() + "." + hexed if any(c.isalpha() for c in did) else None,
        did.replace("-", "") + "." + hexed,
        "{" + did + "}." + hexed,
        did + "." + hexed[:-2],
        did + "." + hexed + "00",
        did + hexed,
        token + "." + hexed,
        token + " " * (MAX_TOKEN - len(token) + 1),
    ):
        if spelled is not None:
            assert claim(spelled) is None, spelled
    assert claim(None) is None


def test_a_token_past_the_bound_is_not_parsed() -> None:
    token = mint(uuid.UUID(int=1), bytes(SECRET_BYTES)).token
    assert claim(token) is not None
    assert claim(token + "x" * MAX_TOKEN) is None


@given(st.none() | st.text(max_size=20), st.none() | st.text(max_size=20))
def test_owners_are_told_apart_by_their_keys(a: str | None, b: str | None) -> None:
    assert (owner_key(a) == owner_key(b)) == (a == b)


def test_the_empty_subject_is_not_the_anonymous_namespace() -> None:
    assert owner_key("") != owner_key(None)


def test_a_secret_of_the_wrong_size_is_not_minted() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        mint(uuid.UUID(int=1), b"short")
