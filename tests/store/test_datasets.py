"""The chain, dataspace and Yjs records: journaled, decoded, exported as their datasets, row for
row, with every field as it was given (hypothesis draws the records)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.errors import InvalidRecord
from octosync.store.datasets import BY_KIND, BY_NAME, DATASETS
from octosync.store.export import export
from octosync.store.journal import Journal
from octosync.store.records import (
    ChainEventSeen,
    ChainStateSeen,
    DataspaceEvent,
    Record,
    YjsUpdate,
    encode_record,
)

TEXT = st.text(alphabet=st.sampled_from("ab:é\n<>\"'"), max_size=40)
NAME = st.text(alphabet=st.sampled_from("ab_-9Z"), min_size=1, max_size=64)
SEQ = st.integers(0, 2**63 - 1)
WHO = st.none() | st.text(alphabet=st.sampled_from("0123456789abcdef."), max_size=64)

chain_events = st.builds(ChainEventSeen, NAME, TEXT.filter(bool), SEQ, TEXT, TEXT, WHO)
chain_states = st.builds(
    ChainStateSeen,
    NAME,
    SEQ,
    st.booleans(),
    TEXT,
    st.dictionaries(TEXT.filter(bool), st.lists(SEQ, max_size=3).map(tuple), max_size=3),
)
dataspace_events = st.builds(
    DataspaceEvent,
    NAME,
    st.sampled_from(["assert", "retract", "message"]),
    st.integers(0, 2**63 - 1),
    TEXT,
    TEXT,
    WHO,
)
yjs_updates = st.builds(YjsUpdate, NAME, st.binary(max_size=40), WHO)
records = st.lists(
    chain_events | chain_states | dataspace_events | yjs_updates, min_size=1, max_size=20
)


def expected_row(rec: Record) -> dict[str, Any]:
    """The record's fields as the dataset should hold them (written out here, not derived
    from the row functions under test)."""
    if isinstance(rec, ChainStateSeen):
        consumed = sorted(
            {"device": d, "device_sequencer": s}.items()
            for d, ss in rec.consumed.items()
            for s in ss
        )
        return {
            "chain": rec.chain,
            "sequencer": rec.sequencer,
            "replace": rec.replace,
            "change": rec.change,
            "consumed": [dict(c) for c in consumed],
        }
    return msgspec.structs.asdict(rec)


def exported_rows(out: Path, name: str) -> list[dict[str, Any]]:
    path = out / name
    if not path.exists():
        return []
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row.pop("hour", None)
        row.pop("recorded_ms")
    return sorted(rows, key=lambda r: r["seq"])


@settings(max_examples=25, deadline=None)
@given(recs=records)
def test_each_record_is_exported_in_its_dataset_as_given(recs: list[Record]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        with Journal(data) as journal:
            seqs = journal.append(recs)
            result = export(journal, data / "export")
        assert result.records == len(recs)
        for dataset in DATASETS[2:]:
            got = exported_rows(data / "export", dataset.name)
            want = [
                {"seq": seq, **expected_row(rec)}
                for seq, rec in zip(seqs, recs, strict=True)
                if encode_record(rec).kind == dataset.kind
            ]
            for row in got:
                if "consumed" in row:
                    row["consumed"] = sorted(row["consumed"], key=lambda c: tuple(c.values()))
            for row in want:
                if "consumed" in row:
                    row["consumed"] = sorted(row["consumed"], key=lambda c: tuple(c.values()))
            assert got == want


def test_every_dataset_is_named_once_and_has_seq_first_and_recorded_ms() -> None:
    assert len(BY_NAME) == len(BY_KIND) == len(DATASETS)
    for dataset in DATASETS:
        assert dataset.schema.names[0] == "seq"
        assert "recorded_ms" in dataset.schema.names


@pytest.mark.parametrize(
    "bad",
    [
        ChainEventSeen("no/slash", "d", 1, "n", "{}"),
        ChainEventSeen("c", "", 1, "n", "{}"),
        ChainStateSeen("c", -1, False, "{}"),
        DataspaceEvent("", "assert", 1, "", ""),
        DataspaceEvent("d", "poke", 1, "", ""),  # type: ignore[arg-type]
    ],
)
def test_a_record_out_of_bounds_is_refused_naming_the_field(bad: Record) -> None:
    with pytest.raises(InvalidRecord) as info:
        encode_record(bad)
    assert info.value.path is not None
