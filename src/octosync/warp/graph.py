"""The reference WARP render graph: nodes and edges with opaque payloads, the ops a diff
carries, and the BLAKE3 state hash a snapshot or diff may name.

The reference (Echo's ``echo-graph``) serialises its Rust types with serde into CBOR and
hashes ``{nodes, edges}`` with nodes sorted by id and edges by ``(src, dst, id)``. Serde's
shapes are reproduced here exactly, because the hash is over those bytes:

- a struct is a map whose text keys come in declaration order (not RFC 8949's sorted order);
- a unit enum variant is its name as text (``"Generic"``); a struct or newtype variant is a
  one-entry map ``{Variant: body}``;
- ``Vec<u8>`` (a payload's ``raw``) is an array of small unsigned integers, not a byte string;
- integers take their shortest head; every length is definite.

Plain data in and out (what a CBOR decoder yields and an encoder takes): ``RenderGraph``
checks every field on the way in and raises ``DecodeError`` naming it; an op that does not
fit the graph (a missing node, a duplicate id) raises ``Desync``, as the reference's
``apply_op`` fails.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import blake3

from octosync.errors import DecodeError, Desync

KINDS = frozenset({"Generic"})
"""Node and edge kinds the reference defines (its enums are marked non-exhaustive)."""
U64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    kind: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class Edge:
    id: int
    src: int
    dst: int
    kind: str
    raw: bytes


# --- canonical bytes (serde + ciborium's shapes) ---------------------------------------------


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    if n < 2**8:
        return bytes([major << 5 | 24, n])
    if n < 2**16:
        return bytes([major << 5 | 25]) + struct.pack(">H", n)
    if n < 2**32:
        return bytes([major << 5 | 26]) + struct.pack(">I", n)
    return bytes([major << 5 | 27]) + struct.pack(">Q", n)


def _text(s: str) -> bytes:
    b = s.encode()
    return _head(3, len(b)) + b


def _u8_array(raw: bytes) -> bytes:
    # each byte is a CBOR uint: 0..23 in one byte, 24..255 as 0x18 followed by the byte
    return _head(4, len(raw)) + b"".join(bytes([b]) if b < 24 else bytes([0x18, b]) for b in raw)


_K_ID, _K_KIND, _K_DATA, _K_RAW = _text("id"), _text("kind"), _text("data"), _text("raw")
_K_SRC, _K_DST = _text("src"), _text("dst")


def _data(raw: bytes) -> bytes:
    return _head(5, 1) + _K_RAW + _u8_array(raw)


def _node_bytes(n: Node) -> bytes:
    return _head(5, 3) + _K_ID + _head(0, n.id) + _K_KIND + _text(n.kind) + _K_DATA + _data(n.raw)


def _edge_bytes(e: Edge) -> bytes:
    return b"".join(
        (
            _head(5, 5),
            _K_ID + _head(0, e.id),
            _K_SRC + _head(0, e.src),
            _K_DST + _head(0, e.dst),
            _K_KIND + _text(e.kind),
            _K_DATA + _data(e.raw),
        )
    )


# --- strict reading of plain data ------------------------------------------------------------


def _map(value: object, keys: Sequence[str], path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DecodeError(f"expected a map, got {type(value).__name__}", path=path)
    if set(value) != set(keys):
        raise DecodeError(
            f"expected exactly the keys {sorted(keys)}, got {sorted(value)}", path=path
        )
    return value


def _u64(value: object, path: str) -> int:
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise DecodeError("expected a u64", path=path)
    return value


def _kind(value: object, path: str) -> str:
    if value not in KINDS:
        raise DecodeError(f"unknown kind {value!r}", path=path)
    assert isinstance(value, str)
    return value


def _raw(value: object, path: str) -> bytes:
    """A payload ``{raw: [u8, ...]}``."""
    raw = _map(value, ("raw",), path)["raw"]
    if not isinstance(raw, list) or not all(type(b) is int and 0 <= b < 256 for b in raw):
        raise DecodeError("expected an array of u8", path=f"{path}.raw")
    return bytes(raw)


def _variant(value: object, path: str) -> tuple[str, Any]:
    if not isinstance(value, Mapping) or len(value) != 1:
        raise DecodeError("expected a one-entry map {Variant: body}", path=path)
    ((name, body),) = value.items()
    if not isinstance(name, str):
        raise DecodeError("a variant name is text", path=path)
    return name, body


def _replace(value: object, path: str) -> bytes:
    name, body = _variant(value, path)
    if name != "Replace":
        raise DecodeError(f"unknown patch {name!r}", path=path)
    return _raw(body, f"{path}.Replace")


def _update(body: object, at: str) -> tuple[int, bytes]:
    """``{id, data: {Replace: {raw}}}``: the body of ``UpdateNode`` and ``UpdateEdge``."""
    m = _map(body, ("id", "data"), at)
    return _u64(m["id"], f"{at}.id"), _replace(m["data"], f"{at}.data")


def node_from_plain(value: object, path: str = "node") -> Node:
    m = _map(value, ("id", "kind", "data"), path)
    return Node(
        _u64(m["id"], f"{path}.id"),
        _kind(m["kind"], f"{path}.kind"),
        _raw(m["data"], f"{path}.data"),
    )


def edge_from_plain(value: object, path: str = "edge") -> Edge:
    m = _map(value, ("id", "src", "dst", "kind", "data"), path)
    return Edge(
        _u64(m["id"], f"{path}.id"),
        _u64(m["src"], f"{path}.src"),
        _u64(m["dst"], f"{path}.dst"),
        _kind(m["kind"], f"{path}.kind"),
        _raw(m["data"], f"{path}.data"),
    )


def _payload(raw: bytes) -> dict[str, Any]:
    return {"raw": list(raw)}


def node_plain(n: Node) -> dict[str, Any]:
    return {"id": n.id, "kind": n.kind, "data": _payload(n.raw)}


def edge_plain(e: Edge) -> dict[str, Any]:
    return {"id": e.id, "src": e.src, "dst": e.dst, "kind": e.kind, "data": _payload(e.raw)}


# --- ops, as a producer writes them -----------------------------------------------------------


def add_node(id: int, raw: bytes = b"", kind: str = "Generic") -> dict[str, Any]:
    return {"AddNode": node_plain(Node(id, kind, raw))}


def remove_node(id: int) -> dict[str, Any]:
    return {"RemoveNode": {"id": id}}


def update_node(id: int, raw: bytes) -> dict[str, Any]:
    return {"UpdateNode": {"id": id, "data": {"Replace": _payload(raw)}}}


def add_edge(
    id: int, src: int, dst: int, raw: bytes = b"", kind: str = "Generic"
) -> dict[str, Any]:
    return {"AddEdge": edge_plain(Edge(id, src, dst, kind, raw))}


def remove_edge(id: int) -> dict[str, Any]:
    return {"RemoveEdge": {"id": id}}


def update_edge(id: int, raw: bytes) -> dict[str, Any]:
    return {"UpdateEdge": {"id": id, "data": {"Replace": _payload(raw)}}}


class RenderGraph:
    """A mutable render graph keyed by id; ``state_hash`` is the reference's ``compute_hash``."""

    __slots__ = ("edges", "nodes")

    def __init__(self, nodes: Iterable[Node] = (), edges: Iterable[Edge] = ()) -> None:
        self.nodes: dict[int, Node] = {}
        self.edges: dict[int, Edge] = {}
        for n in nodes:
            if n.id in self.nodes:
                raise Desync(f"node {n.id} appears twice", path="nodes")
            self.nodes[n.id] = n
        for e in edges:
            if e.id in self.edges:
                raise Desync(f"edge {e.id} appears twice", path="edges")
            self.edges[e.id] = e

    @classmethod
    def from_plain(cls, value: object) -> RenderGraph:
        """A snapshot's ``graph`` as a CBOR decoder yields it (``DecodeError`` if malformed).

        The reference keeps a graph as two lists and never checks an edge's ends in a
        snapshot, so neither is checked here: only ids repeating (``Desync``)."""
        m = _map(value, ("nodes", "edges"), "graph")
        nodes, edges = m["nodes"], m["edges"]
        if not isinstance(nodes, list):
            raise DecodeError("expected an array", path="graph.nodes")
        if not isinstance(edges, list):
            raise DecodeError("expected an array", path="graph.edges")
        return cls(
            (node_from_plain(n, f"graph.nodes[{i}]") for i, n in enumerate(nodes)),
            (edge_from_plain(e, f"graph.edges[{i}]") for i, e in enumerate(edges)),
        )

    def to_plain(self) -> dict[str, Any]:
        """The graph as a snapshot carries it (sorted, as the hash reads it)."""
        return {
            "nodes": [node_plain(n) for n in self._sorted_nodes()],
            "edges": [edge_plain(e) for e in self._sorted_edges()],
        }

    def copy(self) -> RenderGraph:
        return RenderGraph(self.nodes.values(), self.edges.values())

    def _sorted_nodes(self) -> list[Node]:
        return [self.nodes[k] for k in sorted(self.nodes)]

    def _sorted_edges(self) -> list[Edge]:
        return sorted(self.edges.values(), key=lambda e: (e.src, e.dst, e.id))

    def canonical_bytes(self) -> bytes:
        """``{nodes, edges}`` as the reference's ``to_canonical_bytes`` writes it."""
        nodes = self._sorted_nodes()
        edges = self._sorted_edges()
        return b"".join(
            (
                _head(5, 2),
                _text("nodes"),
                _head(4, len(nodes)),
                *map(_node_bytes, nodes),
                _text("edges"),
                _head(4, len(edges)),
                *map(_edge_bytes, edges),
            )
        )

    def state_hash(self) -> bytes:
        return blake3.blake3(self.canonical_bytes()).digest()

    def check_hash(self, expected: bytes, what: str = "the graph") -> None:
        """``Desync`` (path ``state_hash``) unless ``expected`` is this graph's state hash."""
        got = self.state_hash()
        if got != expected:
            raise Desync(
                f"{what}: state hash {got.hex()[:16]}... does not match the frame's "
                f"{expected.hex()[:16]}...",
                path="state_hash",
            )

    def apply_ops(self, ops: object) -> None:
        """Apply a diff's ``ops`` in order, all or nothing (the graph is unchanged on error)."""
        if not isinstance(ops, list):
            raise DecodeError("expected an array of ops", path="ops")
        trial = self.copy()
        for i, op in enumerate(ops):
            trial.apply_op(op, f"ops[{i}]")
        self.nodes, self.edges = trial.nodes, trial.edges

    def apply_op(self, op: object, path: str = "op") -> None:
        name, body = _variant(op, path)
        at = f"{path}.{name}"
        if name == "AddNode":
            n = node_from_plain(body, at)
            if n.id in self.nodes:
                raise Desync(f"node already exists: {n.id}", path=at)
            self.nodes[n.id] = n
        elif name == "RemoveNode":
            nid = _u64(_map(body, ("id",), at)["id"], f"{at}.id")
            if self.nodes.pop(nid, None) is None:
                raise Desync(f"missing node: {nid}", path=at)
            for eid in [e.id for e in self.edges.values() if nid in (e.src, e.dst)]:
                del self.edges[eid]
        elif name == "UpdateNode":
            nid, raw = _update(body, at)
            old = self.nodes.get(nid)
            if old is None:
                raise Desync(f"missing node: {nid}", path=at)
            self.nodes[nid] = Node(nid, old.kind, raw)
        elif name == "AddEdge":
            e = edge_from_plain(body, at)
            if e.id in self.edges:
                raise Desync(f"edge already exists: {e.id}", path=at)
            for end, nid in (("src", e.src), ("dst", e.dst)):
                if nid not in self.nodes:
                    raise Desync(f"missing {end} node: {nid}", path=at)
            self.edges[e.id] = e
        elif name == "RemoveEdge":
            eid = _u64(_map(body, ("id",), at)["id"], f"{at}.id")
            if self.edges.pop(eid, None) is None:
                raise Desync(f"missing edge: {eid}", path=at)
        elif name == "UpdateEdge":
            eid, raw = _update(body, at)
            old_e = self.edges.get(eid)
            if old_e is None:
                raise Desync(f"missing edge: {eid}", path=at)
            self.edges[eid] = Edge(eid, old_e.src, old_e.dst, old_e.kind, raw)
        else:
            raise DecodeError(f"unknown op {name!r}", path=path)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RenderGraph)
            and self.nodes == other.nodes
            and self.edges == other.edges
        )

    __hash__ = None  # type: ignore[assignment]
