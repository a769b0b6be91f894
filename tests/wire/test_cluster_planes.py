"""What nodes say to each other about shared documents: round trips, and strict decoding that
names what is wrong."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.wire import cluster_planes as wire
from tests.strategies import crdt_ops, node_ids

nodes = st.from_regex(r"[A-Za-z0-9_-]{1,16}", fullmatch=True)
streams = st.text(min_size=1, max_size=30)
hashes = st.integers(0, 2**64 - 1)
inline_ops = crdt_ops.filter(lambda op: isinstance(op.state, bytes))


@given(nodes, streams, st.lists(inline_ops, max_size=5))
def test_a_batch_round_trips(node: str, stream: str, ops: list[object]) -> None:
    batch = wire.PlaneBatch(node, stream, ops)  # type: ignore[arg-type]
    assert wire.decode(wire.encode(batch)) == batch


@given(streams, st.integers(0, 2**53), st.lists(inline_ops, max_size=5))
def test_a_document_snapshot_round_trips(stream: str, position: int, ops: list[object]) -> None:
    snapshot = wire.DocSnapshot(stream, position, ops)  # type: ignore[arg-type]
    assert wire.decode(wire.encode(snapshot)) == snapshot


@given(
    nodes,
    streams,
    st.lists(hashes, min_size=wire.BUCKETS, max_size=wire.BUCKETS),
    st.none() | st.tuples(node_ids, st.text(max_size=10)),
    st.dictionaries(streams, hashes, max_size=4),
)
def test_repair_messages_round_trip(
    node: str,
    stream: str,
    digests: list[int],
    after: tuple[int, str] | None,
    roots: dict[str, int],
) -> None:
    for message in (
        wire.RepairRequest(node, stream, digests, after),
        wire.RepairReply(stream, [], resume=after),
        wire.PlaneRoots(node, roots),
    ):
        assert wire.decode(wire.encode(message)) == message


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"type": "plane-ops", "node": "", "stream": "s", "ops": []}, "$.node"),
        ({"type": "plane-ops", "node": "n", "stream": "s", "ops": [{}]}, "$.ops[0].slot_id"),
        ({"type": "plane-roots", "node": "n", "roots": {"s": -1}}, "$.roots[...]"),
        ({"type": "plane-repair?", "node": "n", "stream": "s", "digests": [0] * 255}, "$.digests"),
        ({"type": "plane-snapshot", "stream": "s", "position": -1, "ops": []}, "$.position"),
        ({"type": "nonsense"}, "$.type"),
    ],
)
def test_a_bad_message_is_refused_naming_the_field(message: object, path: str) -> None:
    with pytest.raises(DecodeError) as refused:
        wire.decode(msgspec.msgpack.encode(message))
    assert refused.value.path == path
