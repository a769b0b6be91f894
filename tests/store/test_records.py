"""Op records for the journal: the fast check of ``encode_op_records`` agrees with the strict
decode on every record, valid or not, so the hot path never lets an invalid record through."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import InvalidRecord
from octosync.store import records

TEXT = st.text(alphabet=st.sampled_from("ab:é\n"), max_size=300)
INTS = st.integers(-3, 2**64 - 1) | st.sampled_from([2**53, 2**53 + 1, 2**31 - 1, 2**31])


@st.composite
def op_records(draw: st.DrawFn) -> OpRecord:
    node = draw(TEXT)
    ts = Timestamp(draw(INTS), draw(INTS), node)
    origin = draw(st.just(node) | TEXT)
    return OpRecord(
        draw(TEXT),
        draw(TEXT | st.text(min_size=4090, max_size=4100)),
        draw(st.sampled_from(OpKind)),
        draw(st.binary(max_size=8)),
        ts,
        origin,
        draw(TEXT),
    )


def strictly_valid(rec: OpRecord) -> bool:
    try:
        msgspec.msgpack.decode(msgspec.msgpack.encode(rec), type=OpRecord)
    except (msgspec.ValidationError, OverflowError):
        return False
    return True


def encodable(rec: OpRecord) -> bool:
    try:
        msgspec.msgpack.encode(rec)
    except OverflowError:
        return False
    return True


@given(op_records())
@settings(max_examples=400, deadline=None)
def test_the_fast_check_agrees_with_the_strict_decode(rec: OpRecord) -> None:
    assert records._plainly_valid(rec) == strictly_valid(rec)


@given(st.lists(op_records(), max_size=4))
@settings(max_examples=200, deadline=None)
def test_a_batch_is_encoded_exactly_when_every_record_is_valid(batch: list[OpRecord]) -> None:
    if not all(map(encodable, batch)):
        return
    if all(map(strictly_valid, batch)):
        encoded = records.encode_op_records(batch)
        assert [e.body for e in encoded] == [msgspec.msgpack.encode(r) for r in batch]
    else:
        with pytest.raises(InvalidRecord):
            records.encode_op_records(batch)


def test_a_record_of_the_wrong_types_is_never_plainly_valid() -> None:
    ts = Timestamp(1, 0, "n")
    wrong = OpRecord("m", "k", "PUT", b"", ts, "n", "1:0:n")  # type: ignore[arg-type]
    assert not records._plainly_valid(wrong)
    assert records._plainly_valid(OpRecord("m", "k", OpKind.PUT, b"", ts, "n", "1:0:n"))
