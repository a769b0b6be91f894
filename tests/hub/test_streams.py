"""Stream names per face, and the chain streams only a chain's publisher may produce."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import Forbidden
from octosync.hub import Hub, ViewKey, lazily_frame
from octosync.hub.streams import (
    chain_stream_id,
    check_chain_publisher,
    check_chain_write,
    is_chain_stream,
    stream_face,
)
from octosync.server.auth import ClaimGrants, grants_from_claims
from tests.hub.helpers import cell_set, json_encoder, snap

JSON = ViewKey("lazily", "json")
ANYONE = grants_from_claims({"sub": "rogue", "streams": {"*": ["read", "publish", "write"]}})
PUBLISHER = grants_from_claims(
    {"sub": "pub", "streams": {"chain:game": ["publish"], "$chain:game": ["publish"]}}
)
OTHER_CHAIN = grants_from_claims(
    {"sub": "pub", "streams": {"chain:game": ["publish"], "$chain:other": ["publish"]}}
)


def make_hub() -> Hub:
    return Hub(clock=lambda: 0.0, encoders={"json": json_encoder})


def test_chain_streams_are_lazily_streams() -> None:
    assert chain_stream_id("game") == "chain:game"
    assert is_chain_stream("chain:game")
    assert not is_chain_stream("game")
    assert not is_chain_stream(7)
    assert stream_face("chain:game") == "lazily"


def test_only_the_chains_publisher_produces_its_stream() -> None:
    hub = make_hub()
    hub.connect(1, JSON, grants=ANYONE)
    hub.connect(2, JSON, grants=OTHER_CHAIN)
    hub.connect(3, JSON, grants=PUBLISHER)
    hub.connect(4, JSON, grants=ANYONE)
    hub.subscribe(4, "chain:game")
    for rogue in (1, 2):
        with pytest.raises(Forbidden, match=r"\$chain:game"):
            hub.publish(rogue, "chain:game", lazily_frame(snap(0, {1: b"x"})))
    hub.publish(1, "plain", lazily_frame(snap(0, {1: b"x"})))  # the wildcard still works there
    assert hub.producer_of("chain:game") is None
    assert hub.take(4) == []  # nothing of the refused frames reached a subscriber
    hub.publish(3, "chain:game", lazily_frame(snap(0, {1: b"a"})))
    hub.publish(3, "chain:game", lazily_frame(cell_set(0, 1, b"b")))
    assert hub.producer_of("chain:game") == 3
    assert len(hub.take(4)) == 2


def test_the_handshake_refuses_what_publish_would() -> None:
    hub = make_hub()
    with pytest.raises(Forbidden, match="chain's state"):
        hub.check_join(ANYONE, "chain:game", publish=True)
    hub.check_join(ANYONE, "chain:game", publish=False)
    hub.check_join(PUBLISHER, "chain:game", publish=True)


def test_nobody_writes_to_a_chain_stream() -> None:
    hub = make_hub()
    hub.connect(1, JSON, grants=PUBLISHER)
    hub.connect(2, JSON, grants=ANYONE)
    hub.publish(1, "chain:game", lazily_frame(snap(0, {1: b"a"})))
    hub.take(1)
    with pytest.raises(Forbidden, match="only through the chain's events"):
        hub.write(2, "chain:game", cell_set(0, 1, b"w"))
    assert hub.take(1) == []
    with pytest.raises(Forbidden):
        check_chain_write("chain:x")
    check_chain_write("x")


names = st.text(min_size=1, max_size=6).filter(lambda s: not s.startswith("chain:"))
actions = st.lists(st.sampled_from(["read", "publish", "write"]), unique=True)


@given(names, st.dictionaries(st.sampled_from(["*", "chain:a", "$chain:a", "$*"]), actions))
def test_the_publisher_scope_is_the_only_way_in(stream: str, table: dict[str, list[str]]) -> None:
    grants = ClaimGrants.of("x", streams={k: frozenset(v) for k, v in table.items()})
    chain = f"chain:{stream}"
    explicit = f"${chain}" in table and "publish" in table[f"${chain}"]
    if explicit:
        check_chain_publisher(grants, chain)
    else:
        with pytest.raises(Forbidden):
            check_chain_publisher(grants, chain)
    check_chain_publisher(grants, stream)  # not a chain stream: not this rule's business


def test_the_face_is_the_views_field_not_its_encoders_spelling() -> None:
    """A lazily connection whose encoder happens to be named like WVP's is still lazily, and
    a WVP connection with any encoder name is WVP: the authority reads ``ViewKey.face``."""
    hub = Hub(clock=lambda: 0.0, encoders={"wvp-lookalike": json_encoder, "t": json_encoder})
    hub.connect(1, ViewKey("lazily", "wvp-lookalike"), grants=ANYONE)
    hub.connect(2, ViewKey("wvp", "t"), grants=ANYONE)
    hub.subscribe(1, "scoreboard")
    with pytest.raises(Forbidden, match="belongs to the wvp face"):
        hub.subscribe(1, "warp:1")
    with pytest.raises(Forbidden, match="belongs to the lazily face"):
        hub.subscribe(2, "scoreboard")
    hub.check_stream(ViewKey("lazily", "wvp-lookalike"), "scoreboard")
    with pytest.raises(Forbidden):
        hub.check_stream(ViewKey("wvp", "t"), "scoreboard")
