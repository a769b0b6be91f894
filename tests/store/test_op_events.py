"""The journal's op records by seq, read back for TopGun's event journal."""

from __future__ import annotations

from pathlib import Path

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.journal import Journal
from octosync.store.op_events import OpSource


def test_op_records_come_back_with_their_seqs_and_the_scan_moves_on(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        recs = [
            OpRecord("users", f"k{i}", OpKind.PUT, b"\x01", Timestamp(10 + i, 0, "w"), "w", f"o{i}")
            for i in range(5)
        ]
        seqs = journal.append(recs)
        read = OpSource(journal).read
        first, after = read(1, 2)
        assert [(s, r.key) for s, r in first] == [(seqs[0], "k0"), (seqs[1], "k1")]
        rest, end = read(after, 100)
        assert [r.key for _, r in rest] == ["k2", "k3", "k4"]
        assert read(end, 100) == ([], end)
        assert OpSource(journal).latest() == seqs[-1]
