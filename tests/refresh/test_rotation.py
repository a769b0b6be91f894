"""The refresh-token rules, sans-I/O: rotate a live token, revoke a family on reuse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import RefreshTokenRefused
from octosync.refresh.rotation import Grant, Reuse, Rotate, hash_token, redeem, start_family

raws = st.text(alphabet="0123456789abcdef", min_size=8, max_size=64)
times = st.floats(min_value=0, max_value=1e9, allow_nan=False)
lifetimes = st.floats(min_value=1, max_value=1e7, allow_nan=False)


@given(raws, raws, times, lifetimes, st.lists(st.text(min_size=1, max_size=8), max_size=4))
def test_a_live_token_rotates_within_its_family(
    raw: str, nxt: str, now: float, lifetime: float, roles: list[str]
) -> None:
    first = start_family("ann", tuple(roles), raw, now, lifetime)
    assert first.token_hash == hash_token(raw) != raw  # only the hash is kept
    step = redeem(first, nxt, now, lifetime)
    assert isinstance(step, Rotate)
    assert step.spent == first.token_hash
    assert step.grant.token_hash == hash_token(nxt)
    assert (step.grant.family, step.grant.subject, step.grant.roles) == (
        first.family,
        "ann",
        tuple(roles),
    )
    assert step.grant.expires_at == now + lifetime
    assert not step.grant.spent


@given(raws, raws, times, lifetimes)
def test_a_spent_token_revokes_its_family(raw: str, nxt: str, now: float, life: float) -> None:
    spent = Grant(hash_token(raw), "fam", "ann", (), now + life, spent=True)
    assert now < spent.expires_at
    assert redeem(spent, nxt, now, life) == Reuse("fam")


@given(raws, raws, times, lifetimes, st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_unknown_revoked_and_expired_tokens_are_refused(
    raw: str, nxt: str, now: float, life: float, late: float
) -> None:
    grant = start_family("ann", (), raw, now, life)
    with pytest.raises(RefreshTokenRefused, match="unknown"):
        redeem(None, nxt, now, life)
    revoked = Grant(grant.token_hash, grant.family, "ann", (), grant.expires_at, revoked=True)
    with pytest.raises(RefreshTokenRefused, match="revoked"):
        redeem(revoked, nxt, now, life)
    with pytest.raises(RefreshTokenRefused, match="expired"):
        redeem(grant, nxt, grant.expires_at + late, life)
