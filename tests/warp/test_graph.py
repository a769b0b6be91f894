"""The reference render graph: serde's CBOR shapes byte for byte, ops, strict reading."""

from __future__ import annotations

from typing import Any

import blake3
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError, Desync
from octosync.warp import graph as g
from octosync.warp.graph import Edge, Node, RenderGraph

ids = st.integers(0, 2**64 - 1)
raws = st.binary(max_size=40)


@st.composite
def graphs(draw: st.DrawFn) -> RenderGraph:
    node_ids = draw(st.lists(ids, unique=True, max_size=8))
    nodes = [Node(i, "Generic", draw(raws)) for i in node_ids]
    edges = []
    if node_ids:
        for eid in draw(st.lists(ids, unique=True, max_size=8)):
            edges.append(
                Edge(
                    eid,
                    draw(st.sampled_from(node_ids)),
                    draw(st.sampled_from(node_ids)),
                    "Generic",
                    draw(raws),
                )
            )
    return RenderGraph(draw(st.permutations(nodes)), draw(st.permutations(edges)))


def test_empty_graph_bytes_written_by_hand() -> None:
    # map(2) "nodes" [] "edges" [], keys in declaration order (nodes before edges)
    expected = bytes.fromhex("a2656e6f6465738065656467657380")
    assert RenderGraph().canonical_bytes() == expected
    assert RenderGraph().state_hash() == blake3.blake3(expected).digest()


def test_one_node_bytes_written_by_hand() -> None:
    graph = RenderGraph([Node(30, "Generic", b"\x01\xff")])
    expected = bytes.fromhex(
        "a2"
        "656e6f646573"
        "81"
        "a3"
        "626964"
        "181e"  # id: 30 needs the one-byte form
        "646b696e64"
        "6747656e65726963"  # kind: "Generic"
        "6464617461"
        "a1"
        "63726177"
        "82"
        "01"
        "18ff"  # data: {raw: [1, 255]}
        "656564676573"
        "80"
    )
    assert graph.canonical_bytes() == expected


@given(graphs())
def test_canonical_bytes_are_cbor2s_encoding_of_the_sorted_plain_form(graph: RenderGraph) -> None:
    """cbor2 keeps a dict's insertion order and writes shortest integers: the same rules as
    serde through ciborium, from an independent encoder."""
    plain = graph.to_plain()
    assert [n["id"] for n in plain["nodes"]] == sorted(n["id"] for n in plain["nodes"])
    keys = [(e["src"], e["dst"], e["id"]) for e in plain["edges"]]
    assert keys == sorted(keys)
    assert graph.canonical_bytes() == cbor2.dumps(plain)


@given(graphs())
def test_plain_form_roundtrips_and_order_does_not_change_the_hash(graph: RenderGraph) -> None:
    back = RenderGraph.from_plain(cbor2.loads(cbor2.dumps(graph.to_plain())))
    assert back == graph
    shuffled = graph.to_plain()
    shuffled["nodes"].reverse()
    shuffled["edges"].reverse()
    assert RenderGraph.from_plain(shuffled).state_hash() == graph.state_hash()


def test_ops_follow_the_reference() -> None:
    graph = RenderGraph()
    graph.apply_ops([g.add_node(1, b"a"), g.add_node(2), g.add_edge(10, 1, 2, b"e")])
    graph.apply_op(g.update_node(1, b"b"))
    graph.apply_op(g.update_edge(10, b"f"))
    assert graph.nodes[1].raw == b"b"
    assert graph.edges[10].raw == b"f"
    graph.apply_op(g.remove_node(2))  # removes its incident edges too
    assert list(graph.nodes) == [1]
    assert graph.edges == {}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([g.add_node(1), g.add_node(1)], "node already exists: 1"),
        ([g.remove_node(3)], "missing node: 3"),
        ([g.update_node(3, b"")], "missing node: 3"),
        ([g.add_node(1), g.add_edge(5, 1, 2)], "missing dst node: 2"),
        ([g.add_edge(5, 2, 1)], "missing src node: 2"),
        ([g.remove_edge(5)], "missing edge: 5"),
        ([g.update_edge(5, b"")], "missing edge: 5"),
    ],
)
def test_ops_that_do_not_fit_are_desync_and_change_nothing(ops: list[Any], message: str) -> None:
    graph = RenderGraph([Node(9, "Generic", b"")])
    before = graph.canonical_bytes()
    with pytest.raises(Desync, match=message):
        graph.apply_ops(ops)
    assert graph.canonical_bytes() == before


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"nodes": []}, "graph"),
        ({"nodes": {}, "edges": []}, "graph.nodes"),
        (
            {"nodes": [{"id": -1, "kind": "Generic", "data": {"raw": []}}], "edges": []},
            "graph.nodes[0].id",
        ),
        (
            {"nodes": [{"id": 1, "kind": "Other", "data": {"raw": []}}], "edges": []},
            "graph.nodes[0].kind",
        ),
        (
            {"nodes": [{"id": 1, "kind": "Generic", "data": {"raw": b"x"}}], "edges": []},
            "graph.nodes[0].data.raw",
        ),
        (
            {"nodes": [{"id": 1, "kind": "Generic", "data": {"raw": [256]}}], "edges": []},
            "graph.nodes[0].data.raw",
        ),
        ({"nodes": [], "edges": [{"id": 1}]}, "graph.edges[0]"),
    ],
)
def test_malformed_graphs_name_the_field(value: object, path: str) -> None:
    with pytest.raises(DecodeError) as info:
        RenderGraph.from_plain(value)
    assert info.value.path == path


def test_malformed_ops_are_decode_errors() -> None:
    graph = RenderGraph()
    with pytest.raises(DecodeError) as info:
        graph.apply_ops([{"Explode": {}}])
    assert info.value.path == "ops[0]"
    with pytest.raises(DecodeError) as info:
        graph.apply_ops([{"UpdateNode": {"id": 1, "data": {"Merge": {"raw": []}}}}])
    assert info.value.path == "ops[0].UpdateNode.data"
    with pytest.raises(DecodeError):
        graph.apply_ops({"AddNode": {}})
