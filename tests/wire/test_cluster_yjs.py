"""The cluster's Yjs messages: every one round-trips; anything else is a typed refusal."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.wire import cluster_yjs as wire

names = st.text(min_size=1, max_size=20)
vectors = st.builds(wire.Vector, st.binary(max_size=40), st.integers(0, 2**64 - 1))
messages = st.one_of(
    st.builds(wire.YjsBatch, names, names, st.lists(st.binary(max_size=60), max_size=5)),
    st.builds(wire.YjsVectors, names, st.dictionaries(names, vectors, max_size=5)),
    st.builds(wire.YjsDiff, names, names, st.binary(max_size=60)),
)


@given(messages)
def test_every_message_round_trips(message: wire.YjsClusterMessage) -> None:
    assert wire.decode(wire.encode(message)) == message


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"type": "yjs-updates", "node": "", "document": "d", "updates": []}, "$.node"),
        ({"type": "yjs-diff", "node": "n", "document": "d", "update": 5}, "$.update"),
        ({"type": "plane-ops", "node": "n"}, "$.type"),
    ],
)
def test_a_malformed_message_is_a_decode_error_naming_its_field(
    message: dict[str, object], path: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        wire.decode(msgspec.msgpack.encode(message))
    assert caught.value.path == path
