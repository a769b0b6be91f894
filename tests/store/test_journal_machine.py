"""The journal and its export against a plain list, over random histories of appends,
exports and reopenings."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow.dataset as ds
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.export import export, read_watermark
from octosync.store.journal import Journal
from octosync.store.records import Record, StreamFrame

ops = st.builds(
    OpRecord,
    map=st.sampled_from(["a", "b"]),
    key=st.text(max_size=4),
    op=st.sampled_from(list(OpKind)),
    value=st.binary(max_size=8),
    ts=st.builds(
        Timestamp, st.integers(0, 2**53), st.integers(0, 2**31 - 1), st.sampled_from(["n1", "n2"])
    ),
    origin=st.sampled_from(["n1", "n2"]),
    op_id=st.text(min_size=1, max_size=6),
)
frames = st.builds(
    lambda s, e, snap, h: StreamFrame(
        stream=s,
        base_epoch=e if snap else e - 1,
        epoch=e,
        snapshot=snap,
        payload=b"p",
        state_hash=h,
    ),
    st.sampled_from(["s", "t"]),
    st.integers(1, 2**53),
    st.booleans(),
    st.none() | st.binary(min_size=1, max_size=4),
)


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="journal-machine-"))
        self.journal = Journal(self.dir / "data", durability="normal", clock=lambda: 0)
        self.model: list[Record] = []
        self.exported = 0

    @rule(batch=st.lists(st.one_of(ops, frames), max_size=6))
    def append(self, batch: list[Record]) -> None:
        seqs = self.journal.append(batch)
        assert seqs == list(range(len(self.model) + 1, len(self.model) + len(batch) + 1))
        self.model.extend(batch)

    @rule(chunk=st.integers(1, 7))
    def export_new(self, chunk: int) -> None:
        result = export(self.journal, self.dir / "out", chunk=chunk)
        assert result.records == len(self.model) - self.exported
        self.exported = len(self.model)

    @rule()
    def reopen(self) -> None:
        self.journal.close()
        self.journal = Journal(self.dir / "data", durability="full", clock=lambda: 0)

    @invariant()
    def journal_matches_the_model(self) -> None:
        assert self.journal.latest_seq() == len(self.model)
        assert [e.record for e in self.journal.read()] == self.model
        for stream in ("s", "t"):
            want = [
                i + 1
                for i, r in enumerate(self.model)
                if isinstance(r, StreamFrame) and r.stream == stream
            ]
            assert [e.seq for e in self.journal.frames(stream)] == want

    @invariant()
    def export_holds_each_exported_record_once(self) -> None:
        out = self.dir / "out"
        assert read_watermark(out) == self.exported
        seqs: list[int] = []
        for kind in ("ops", "frames"):
            if (out / kind).exists():
                seqs += (
                    ds.dataset(out / kind, format="parquet")
                    .to_table(columns=["seq"])
                    .column("seq")
                    .to_pylist()
                )
        assert sorted(seqs) == list(range(1, self.exported + 1))

    def teardown(self) -> None:
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)


JournalMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestJournalMachine = JournalMachine.TestCase
