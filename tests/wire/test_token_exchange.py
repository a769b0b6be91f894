"""The token exchange's JSON bodies: strict, and nothing but ``DecodeError`` on bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.wire import token_exchange as tx

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.one_of(JSON, st.fixed_dictionaries({"token": JSON}, optional={"provider": JSON})))
def test_any_body_decodes_or_is_a_decode_error(value: Any) -> None:
    data = json.dumps(value).encode()
    for decode in (tx.decode_token_request, tx.decode_refresh_request):
        paths = []
        try:
            decode(data)
        except DecodeError as err:
            paths.append(err.path)
        assert all(paths)  # a refusal names the field (or "body")


@given(st.text(min_size=1, max_size=300), st.none() | st.text(min_size=1, max_size=256))
def test_a_well_formed_exchange_decodes_as_sent(token: str, provider: str | None) -> None:
    body = {"token": token} if provider is None else {"token": token, "provider": provider}
    got = tx.decode_token_request(json.dumps(body).encode())
    assert (got.token, got.provider) == (token, provider)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"\xff", "body"),
        (b'{"refreshToken": 7}', "refreshToken"),
        (b'{"refreshToken": ""}', "refreshToken"),
        (b'{"refreshToken": "x", "more": 1}', "body"),
    ],
)
def test_a_bad_refresh_names_its_field(body: bytes, field: str) -> None:
    with pytest.raises(DecodeError) as err:
        tx.decode_refresh_request(body)
    assert err.value.path == field
