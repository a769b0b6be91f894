"""The shared document's entry layout: node ids, names, and values a peer cannot spoil."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt.shared import SharedState, node_of
from octosync.errors import CrdtValueError
from octosync.ipc.messages import CrdtOp, WireStamp


def test_node_ids_are_fnv1a_64_low_48_bits() -> None:
    # the JS client pins the same two values (clients/js/test/document.test.mjs)
    assert node_of("clicks") == 97025182709940
    assert node_of("é") == 25321904020993
    assert node_of("") == 0xCBF29CE484222325 & 0xFFFF_FFFF_FFFF


def test_names_are_one_key_segment_and_values_json() -> None:
    state = SharedState(1, lambda: 1)
    with pytest.raises(CrdtValueError):
        state.set("a/b", 1)
    with pytest.raises(CrdtValueError):
        state.set("a", object())
    with pytest.raises(CrdtValueError):
        state.add("a", 1.5)  # type: ignore[arg-type]
    with pytest.raises(CrdtValueError):
        SharedState(0, lambda: 1)


def test_a_malformed_entry_from_a_peer_is_skipped_not_fatal() -> None:
    state = SharedState(1, lambda: 1)
    bad = CrdtOp(slot_id=node_of("n"), stamp=WireStamp(5, 0, 2), state=b"{", key="n/pn/2")
    good = CrdtOp(slot_id=node_of("n"), stamp=WireStamp(5, 0, 3), state=b"[4,1]", key="n/pn/3")
    assert state.receive([bad, good]) == {"n"}
    assert state.counter("n") == 3
    foreign = CrdtOp(slot_id=7, stamp=WireStamp(5, 0, 3), state=b"1", key="n/pn/4")
    assert state.receive([foreign]) == set()  # wrong node for the name: not this document's


@given(st.lists(st.integers(-5, 5), max_size=20), st.integers(0, 3))
def test_stamps_always_rise_even_when_the_wall_clock_stalls_or_steps_back(
    amounts: list[int], back: int
) -> None:
    walls = iter([10, 10, 10 - back] * 10)
    state = SharedState(1, lambda: next(walls, 3))
    stamps = [state.add("c", a).stamp for a in amounts]
    keys = [(s.wall_time, s.logical) for s in stamps]
    assert keys == sorted(set(keys))
    assert state.counter("c") == sum(amounts)


WRITE = st.tuples(
    st.integers(0, 2),  # which replica writes
    st.sampled_from(["add", "set", "field", "delete", "multi"]),
    st.sampled_from(["a", "b"]),  # the value's name (a name may hold several kinds)
    st.integers(-3, 3),
)


@given(st.lists(WRITE, max_size=40), st.randoms(use_true_random=False))
def test_document_values_are_what_every_replica_reads_in_any_delivery_order(
    writes: list[tuple[int, str, str, int]], rnd: object
) -> None:
    """The pipeline and the inspector fold a document's ops with ``document_values``: the same
    values, whatever order (and repetition) the ops arrive in, as a replica that saw them all."""
    import random

    from octosync.crdt.shared import document_values

    assert isinstance(rnd, random.Random)
    clock = iter(range(1, 10_000))
    replicas = [SharedState(p, lambda: next(clock)) for p in (11, 22, 33)]
    ops: list[CrdtOp] = []
    for who, what, name, n in writes:
        r = replicas[who]
        if what == "add":
            ops.append(r.add(f"{name}-count", n))
        elif what == "set":
            ops.append(r.set(f"{name}-reg", n))
        elif what == "field":
            ops.append(r.set_field(f"{name}-map", f"f{n % 3}", n))
        elif what == "delete":
            ops.append(r.delete_field(f"{name}-map", f"f{n % 3}"))
        else:
            ops.append(r.set_multi(f"{name}-mv", n))
        for other in replicas:  # sometimes a replica sees the others' ops before writing
            if other is not r and n % 2 == 0:
                other.receive([ops[-1]])
    reader = SharedState(99, lambda: 0)
    reader.receive(ops)
    expected = sorted(
        (name, kind, list(v) if kind == "mv" else v)
        for name, kind in {
            (op.key.split("/")[0], op.key.split("/")[1]) for op in ops if op.key is not None
        }
        for v in [reader.read(name, kind)]
    )
    shuffled = ops + ops[: len(ops) // 2]
    rnd.shuffle(shuffled)
    assert document_values(shuffled) == expected
    if any(w[1] == "add" for w in writes):
        counts = [v for name, kind, v in expected if kind == "pn"]
        totals = {}
        for _, what, name, n in writes:
            if what == "add":
                totals[f"{name}-count"] = totals.get(f"{name}-count", 0) + n
        assert counts == [totals[k] for k in sorted(totals)]


def test_document_values_include_a_text_as_its_string() -> None:
    from octosync.crdt.shared import document_values

    clock = iter(range(1, 100))
    a = SharedState(11, lambda: next(clock))
    ops = a.text_insert("notes", 0, "hello") + a.text_delete("notes", 0, 1)
    ops.append(a.add("clicks", 2))
    assert document_values(ops) == [("clicks", "pn", 2), ("notes", "text", "ello")]
