"""Strategies that draw op records dense in conflicts: few keys, few nodes, close clocks."""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp

NODES = ("node-a", "node-b", "node-c")
KEYS = ("k0", "k1", "k2", "ключ", "😀")


def timestamps(max_millis: int = 6, max_counter: int = 2) -> st.SearchStrategy[Timestamp]:
    return st.builds(
        Timestamp,
        st.integers(0, max_millis),
        st.integers(0, max_counter),
        st.sampled_from(NODES),
    )


_values = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.booleans())


@st.composite
def op_records(
    draw: st.DrawFn,
    op_id: str,
    kinds: tuple[OpKind, ...] = tuple(OpKind),
    maps: tuple[str, ...] = ("m1", "m2"),
    earlier_tags: tuple[str, ...] = (),
) -> OpRecord:
    """One record with the given unique ``op_id``; OR removes pick among ``earlier_tags``."""
    kind = draw(st.sampled_from(kinds))
    ts = draw(timestamps())
    if kind is OpKind.PUT or kind is OpKind.OR_ADD:
        value = msgspec.msgpack.encode(draw(_values))
    elif kind is OpKind.REMOVE:
        value = b""
    elif kind is OpKind.OR_REMOVE:
        tags = draw(st.lists(st.sampled_from(earlier_tags), unique=True)) if earlier_tags else []
        value = msgspec.msgpack.encode(tags)
    else:
        value = msgspec.msgpack.encode(draw(st.integers(-10, 10)))
    return OpRecord(
        map=draw(st.sampled_from(maps)),
        key=draw(st.sampled_from(KEYS)),
        op=kind,
        value=value,
        ts=ts,
        origin=ts.node_id,
        op_id=op_id,
    )


@st.composite
def op_histories(
    draw: st.DrawFn, max_size: int = 25, kinds: tuple[OpKind, ...] = tuple(OpKind)
) -> list[OpRecord]:
    """A history of records with unique op ids; OR removes name tags added earlier in it."""
    size = draw(st.integers(0, max_size))
    out: list[OpRecord] = []
    for i in range(size):
        tags = tuple(r.op_id for r in out if r.op is OpKind.OR_ADD)
        out.append(draw(op_records(f"op-{i}", kinds=kinds, earlier_tags=tags)))
    return out
