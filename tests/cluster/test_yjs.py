"""The sans-I/O decisions of ``/yjs`` documents across a cluster: batches cut at a bound, and
anti-entropy by state vectors (run in-process between pycrdt documents)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text

from octosync.cluster.yjs import (
    Parts,
    YjsRepair,
    YjsRepairTiming,
    delete_set_hash,
    pack,
    read_state_vector,
    split,
    vector,
)
from octosync.wire import cluster_yjs as wire


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(64, 1000))
def test_pack_keeps_every_update_in_order_within_the_bound(
    updates: list[bytes], bound: int
) -> None:
    batches = pack(updates, bound)
    assert [u for b in batches for u in b] == updates
    for batch in batches:
        assert len(batch) == 1 or sum(len(u) + 8 for u in batch) <= bound


Edit = tuple[int, int, str, int]  # (node, position, text, delete length)
edits = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 50), st.text("abc", max_size=3), st.integers(0, 3)),
    max_size=30,
)


def apply(doc: Doc[Any], edit: Edit) -> None:
    text = doc.get("t", type=Text)
    _, at, insert, delete = edit
    at = min(at, len(text))
    if insert:
        text.insert(at, insert)
    if delete and at < len(text):
        del text[at : min(len(text), at + delete)]


def repair(a: YjsRepair, b: YjsRepair, docs: list[dict[str, Doc[Any]]]) -> None:
    """One round: ``a`` broadcasts, ``b`` hears, pushes and asks; ``a`` applies and answers."""
    heard = b.heard(a.node, a.vectors(docs[0]), docs[1])
    for push in heard.pushes:
        docs[0].setdefault(push.document, Doc()).apply_update(push.update)
    answered = a.heard(b.node, heard.asks, docs[0], answer_only=True)
    assert not answered.asks  # an answer never asks back
    for push in answered.pushes:
        docs[1].setdefault(push.document, Doc()).apply_update(push.update)


@settings(max_examples=60, deadline=None)
@given(edits, st.booleans())
def test_one_round_of_vectors_makes_two_nodes_equal(script: list[Edit], shared: bool) -> None:
    """Two nodes edit one document apart (each a client of its own), deletions included; a
    broadcast from each (a node with nothing broadcasts nothing) and the answers bring both to
    the same document."""
    nodes: list[Doc[Any]] = [Doc(client_id=11), Doc(client_id=22)]
    if shared:  # both start from the same text, so some rounds differ only by deletions
        nodes[0].get("t", type=Text).insert(0, "shared-start")
        nodes[1].apply_update(nodes[0].get_update())
    for edit in script:
        apply(nodes[edit[0]], edit)
    docs = [{"doc": nodes[0]}, {"doc": nodes[1]}]
    clock = [0.0]
    a = YjsRepair("a", lambda: clock[0], YjsRepairTiming(interval=1, settle=0.5))
    b = YjsRepair("b", lambda: clock[0], YjsRepairTiming(interval=1, settle=0.5))
    repair(a, b, docs)
    repair(b, a, docs[::-1])
    assert str(nodes[0].get("t", type=Text)) == str(nodes[1].get("t", type=Text))
    assert vector(nodes[0]).deleted == vector(nodes[1]).deleted
    assert read_state_vector(nodes[0].get_state()) == read_state_vector(nodes[1].get_state())


def test_a_document_only_the_peer_holds_is_asked_for() -> None:
    theirs: Doc[Any] = Doc()
    theirs.get("t", type=Text).insert(0, "only there")
    mine: dict[str, Doc[Any]] = {}
    clock = [0.0]
    a = YjsRepair("a", lambda: clock[0])
    b = YjsRepair("b", lambda: clock[0])
    repair(a, b, [{"doc": theirs}, mine])
    assert str(mine["doc"].get("t", type=Text)) == "only there"


def test_deletions_alone_differ_in_the_delete_set_hash_not_the_state_vector() -> None:
    a: Doc[Any] = Doc(client_id=1)
    a.get("t", type=Text).insert(0, "hello")
    b: Doc[Any] = Doc(client_id=2)
    b.apply_update(a.get_update())
    del a.get("t", type=Text)[1:3]
    assert read_state_vector(a.get_state()) == read_state_vector(b.get_state())
    assert delete_set_hash(a) != delete_set_hash(b)


def test_a_document_written_within_settle_is_left_out_and_rounds_take_turns() -> None:
    clock = [0.0]
    r = YjsRepair("a", lambda: clock[0], YjsRepairTiming(settle=2.0, max_documents=2))
    docs: dict[str, Doc[Any]] = {}
    for name in "wxyz":
        docs[name] = Doc()
        docs[name].get("t", type=Text).insert(0, name)
    docs["e"] = Doc()  # empty: nothing to compare
    r.written(["w"])
    assert sorted(r.vectors(docs)) == ["x", "y"]
    assert sorted(r.vectors(docs)) == ["x", "z"]  # z, then round again to x
    clock[0] = 3.0  # w settled: it comes round once the turn wraps
    assert sorted(r.vectors(docs)) == ["y", "z"]
    assert sorted(r.vectors(docs)) == ["w", "x"]
    peer = wire.YjsVectors("b", {"w": vector(Doc())})
    r.written(["w"])
    assert r.heard(peer.node, peer.vectors, docs).pushes == []  # w changed here just now


def test_malformed_vectors_are_passed_over() -> None:
    doc: Doc[Any] = Doc()
    doc.get("t", type=Text).insert(0, "x")
    r = YjsRepair("a", lambda: 0.0)
    heard = r.heard("b", {"doc": wire.Vector(b"\x05\x01", 0)}, {"doc": doc})
    assert heard.pushes == []
    assert heard.asks == {}


@given(st.binary(max_size=2000), st.integers(1, 300))
def test_a_diff_split_into_parts_is_put_together_in_order(update: bytes, size: int) -> None:
    parts = split(update, size)
    assert all(len(p) <= size for p in parts)
    gathering = Parts()
    got = [gathering.take("b", "doc", i, len(parts), p) for i, p in enumerate(parts)]
    assert got[-1] == update
    assert all(g is None for g in got[:-1])


def test_a_part_out_of_order_or_past_the_bound_drops_the_diff() -> None:
    gathering = Parts(max_open=2, max_bytes=10)
    assert gathering.take("b", "doc", 0, 3, b"aaa") is None
    assert gathering.take("b", "doc", 2, 3, b"ccc") is None  # part 1 never came
    assert gathering.take("b", "doc", 1, 3, b"bbb") is None  # nothing is gathered now
    assert gathering.take("b", "doc", 0, 2, b"123456") is None
    assert gathering.take("b", "doc", 1, 2, b"789012") is None  # 12 bytes: past the bound
    for peer in "xyz":  # three gatherings open at once: the oldest gives way
        assert gathering.take(peer, "doc", 0, 2, b"1") is None
    assert gathering.take("x", "doc", 1, 2, b"2") is None
    assert gathering.take("z", "doc", 1, 2, b"2") == b"12"


def test_a_diff_past_the_round_bound_goes_alone() -> None:
    big: Doc[Any] = Doc()
    big.get("t", type=Text).insert(0, "x" * 5000)
    small: Doc[Any] = Doc()
    small.get("t", type=Text).insert(0, "y")
    timing = YjsRepairTiming(max_push_bytes=1000, max_diff_bytes=100_000)
    r = YjsRepair("a", lambda: 0.0, timing)
    empty = vector(Doc())
    heard = r.heard("b", {"a-big": empty, "b-small": empty}, {"a-big": big, "b-small": small})
    assert [p.document for p in heard.pushes] == ["a-big"]
    assert heard.too_large == 1  # the small one waits for the next round
    tight = YjsRepair("a", lambda: 0.0, YjsRepairTiming(max_push_bytes=1000, max_diff_bytes=2000))
    assert tight.heard("b", {"a-big": empty}, {"a-big": big}).pushes == []
