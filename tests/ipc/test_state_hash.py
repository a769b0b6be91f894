"""State hash: order-independent, dialect-independent, sensitive to every field it covers."""

from __future__ import annotations

import blake3
import msgspec
from hypothesis import given
from hypothesis import strategies as st

from octosync.ipc.messages import BlobRef, Edge, NodeSnapshot, Snapshot
from octosync.ipc.state_hash import VERSION, snapshot_hash, state_hash
from octosync.wire import json as wire_json
from tests.strategies import snapshots


def test_known_vector() -> None:
    nodes = [
        NodeSnapshot(2, "i32", "dirty"),
        NodeSnapshot(1, "i32", "resolved", b"\x00\x00\x00\x07"),
    ]
    # Written out by hand from the documented canonical form.
    canonical = (
        b"\x93"  # array(3)
        + b"\xb0"
        + VERSION.encode()  # str(16)
        + b"\x92"  # 2 nodes
        + b"\x95\x01\xa3i32\xa8resolved\xc4\x04\x00\x00\x00\x07\xc0"
        + b"\x95\x02\xa3i32\xa5dirty\xc0\xc0"
        + b"\x91\x92\x02\x01"  # one edge [2, 1]
    )
    assert state_hash(nodes, [Edge(2, 1), Edge(2, 1)]) == blake3.blake3(canonical).digest()


@given(snapshots(), st.randoms(use_true_random=False))
def test_order_and_duplicate_edges_do_not_matter(snap: Snapshot, rnd: object) -> None:
    nodes = list({n.slot_id: n for n in snap.nodes}.values())
    edges = list(snap.edges)
    h = state_hash(nodes, edges)
    rnd.shuffle(nodes)  # type: ignore[attr-defined]
    rnd.shuffle(edges)  # type: ignore[attr-defined]
    assert state_hash(nodes, edges + edges[:1]) == h
    assert len(h) == 32


@given(snapshots())
def test_same_hash_after_a_wire_round_trip(snap: Snapshot) -> None:
    assert snapshot_hash(wire_json.decode(wire_json.encode(snap))) == snapshot_hash(snap)


def test_every_covered_field_changes_the_hash() -> None:
    base = NodeSnapshot(1, "i32", "resolved", b"\x01", "k")
    variants = [
        msgspec.structs.replace(base, slot_id=2),
        msgspec.structs.replace(base, type_tag="i64"),
        msgspec.structs.replace(base, payload=b"\x02"),
        msgspec.structs.replace(base, key=None),
        msgspec.structs.replace(base, payload=BlobRef(0, 1, 0, 0, 0)),
        NodeSnapshot(1, "i32", "dirty", None, "k"),
        NodeSnapshot(1, "i32", "unset", None, "k"),
    ]
    hashes = {state_hash([n], []) for n in [base, *variants]}
    assert len(hashes) == len(variants) + 1
    assert state_hash([base], [Edge(1, 1)]) != state_hash([base], [])
    blob = BlobRef(0, 1, 0, 0, 0, "shm")
    assert state_hash([msgspec.structs.replace(base, payload=blob)], []) != state_hash(
        [msgspec.structs.replace(base, payload=BlobRef(0, 1, 0, 0, 0, "arrow"))], []
    )


def test_epoch_and_roots_are_not_hashed() -> None:
    a = Snapshot(1, (NodeSnapshot(1, "i32", "unset"),), roots=(1,))
    b = Snapshot(9, (NodeSnapshot(1, "i32", "unset"),))
    assert snapshot_hash(a) == snapshot_hash(b)
