from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from octosync.cli import main
from octosync.crdt.op import OpKind, OpRecord
from octosync.store.export import read_watermark
from octosync.store.journal import Journal


def test_generate_then_export_incrementally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "var", tmp_path / "export"
    assert main(["journal", "generate", "--data", str(data), "--ops", "2000", "--seed", "3"]) == 0
    with Journal(data) as j:
        assert j.latest_seq() == 2000
        records = [e.record for e in j.read()]
    assert all(isinstance(r, OpRecord) for r in records)
    kinds = Counter(r.op for r in records if isinstance(r, OpRecord))
    assert set(kinds) == set(OpKind), "every op kind appears"
    origins = {r.origin for r in records if isinstance(r, OpRecord)}
    assert len(origins) >= 3
    ids = Counter(r.op_id for r in records if isinstance(r, OpRecord))
    assert any(n > 1 for n in ids.values()), "some ops are delivered twice"

    assert main(["journal", "export", "--data", str(data), "--to", str(out)]) == 0
    assert "exported seq 1..2000" in capsys.readouterr().out
    assert main(["journal", "export", "--data", str(data), "--to", str(out)]) == 0
    assert "nothing new" in capsys.readouterr().out
    assert main(["journal", "generate", "--data", str(data), "--ops", "100"]) == 0
    assert main(["journal", "export", "--data", str(data), "--to", str(out)]) == 0
    assert read_watermark(out) == 2100


def test_export_of_a_missing_journal_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["journal", "export", "--data", str(tmp_path / "none"), "--to", str(tmp_path / "o")])
        == 2
    )
    assert "--data " + str(tmp_path / "none") + " does not exist" in capsys.readouterr().err
