"""Loading ``compute`` by dotted path."""

from __future__ import annotations

import pytest

from octosync.chain import game
from octosync.chain.app import EXAMPLE_APP, load_app
from octosync.errors import LocalProtocolError


def test_loads_the_example_game() -> None:
    assert load_app(EXAMPLE_APP) is game.compute


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("octosync.chain.game", "module:function"),
        ("no.such.module:f", "cannot import"),
        ("octosync.chain.game:nothing", "has no"),
        ("octosync.chain.game:BOARD", "not callable"),
    ],
)
def test_bad_specs_are_named(spec: str, message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        load_app(spec)
