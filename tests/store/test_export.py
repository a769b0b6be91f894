from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from octosync.errors import StorageError
from octosync.store.export import FRAMES_SCHEMA, OPS_SCHEMA, export, read_watermark
from octosync.store.journal import Journal
from octosync.store.records import StreamFrame
from octosync.store.synthetic import generate_records

HOUR = 3_600_000


def _read(out: Path, kind: str) -> list[dict[str, object]]:
    if not (out / kind).exists():
        return []
    table = ds.dataset(out / kind, format="parquet", partitioning="hive").to_table()
    return sorted(table.drop_columns(["hour"]).to_pylist(), key=lambda r: r["seq"])  # type: ignore[arg-type,return-value]


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _fill(journal: Journal, n: int, seed: int) -> None:
    recs = generate_records(n, seed=seed)
    for i in range(0, len(recs), 37):
        journal.append(recs[i : i + 37])
        journal.append(
            [StreamFrame(stream="s", base_epoch=i, epoch=i + 1, snapshot=False, payload=b"d")]
        )


def test_export_writes_every_record_once_partitioned_by_kind_and_hour(tmp_path: Path) -> None:
    now = [0]
    with Journal(tmp_path / "data", clock=lambda: now[0]) as j:
        _fill(j, 200, seed=1)
        now[0] = 2 * HOUR + 5
        _fill(j, 100, seed=2)
        result = export(j, tmp_path / "out", chunk=64)
        entries = list(j.read())
    out = tmp_path / "out"
    assert result.records == len(entries) == result.last_seq
    ops = _read(out, "ops")
    frames = _read(out, "frames")
    assert [r["seq"] for r in ops] + [r["seq"] for r in frames] != []
    assert sorted([r["seq"] for r in ops] + [r["seq"] for r in frames]) == [e.seq for e in entries]
    by_seq = {e.seq: e.record for e in entries}
    for row in ops:
        rec = by_seq[row["seq"]]  # type: ignore[index]
        assert (row["map"], row["key"], row["op"], row["value"]) == (
            rec.map,
            rec.key,
            rec.op.value,
            rec.value,
        )  # type: ignore[union-attr]
        assert (row["millis"], row["counter"], row["node"], row["op_id"]) == (
            rec.ts.millis,
            rec.ts.counter,
            rec.ts.node_id,
            rec.op_id,
        )  # type: ignore[union-attr]
    hours = sorted(p.name for p in (out / "ops").iterdir())
    assert hours == ["hour=1970-01-01T00", "hour=1970-01-01T02"]
    assert read_watermark(out) == entries[-1].seq
    assert ds.dataset(out / "ops", format="parquet").schema.remove_metadata() == OPS_SCHEMA
    assert ds.dataset(out / "frames", format="parquet").schema.remove_metadata() == FRAMES_SCHEMA


def test_export_is_idempotent_and_incremental(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with Journal(tmp_path / "data", clock=lambda: 0) as j:
        _fill(j, 100, seed=3)
        first = export(j, out, chunk=50)
        snapshot = _files(out)
        again = export(j, out, chunk=50)
        assert again.records == 0
        assert _files(out) == snapshot
        _fill(j, 60, seed=4)
        more = export(j, out, chunk=50)
        assert more.first_seq == first.last_seq + 1
        assert more.last_seq == j.latest_seq()
        seqs = [r["seq"] for r in _read(out, "ops")] + [r["seq"] for r in _read(out, "frames")]
        assert sorted(seqs) == list(range(1, j.latest_seq() + 1))


def test_interrupted_export_leaves_no_visible_partial_file_and_rerun_converges(
    tmp_path: Path,
) -> None:
    with Journal(tmp_path / "data", clock=lambda: 0) as j:
        _fill(j, 150, seed=5)
        clean = tmp_path / "clean"
        export(j, clean, chunk=40)
        broken = tmp_path / "broken"
        export(j, broken, chunk=40)
        # simulate a crash inside the last chunk: its files renamed, its watermark not written
        # (the watermark stays at the previous chunk's end), and a temp file left behind
        wm = read_watermark(broken)
        (broken / "_watermark.json").write_text(json.dumps({"seq": (wm - 1) // 40 * 40}))
        part = next((broken / "ops").rglob("part-*.parquet"))
        (part.parent / f".{part.name}.tmp").write_bytes(b"PAR1 half written")
        export(j, broken, chunk=40)
    assert _read(broken, "ops") == _read(clean, "ops")
    assert _read(broken, "frames") == _read(clean, "frames")


def test_a_bad_watermark_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "_watermark.json").write_text('{"seq": -3}')
    with pytest.raises(StorageError):
        read_watermark(tmp_path)


def test_frames_keep_their_payload_and_dialect(tmp_path: Path) -> None:
    sent = b'{"type":"snapshot","epoch":0,"nodes":[]}'
    with Journal(tmp_path / "data") as journal:
        journal.append(
            [
                StreamFrame("s", 0, 0, True, sent, None, "json"),
                StreamFrame("s", 0, 1, False, b"\x81", None),
            ]
        )
        export(journal, tmp_path / "out")
    rows = _read(tmp_path / "out", "frames")
    assert [(r["payload"], r["codec"]) for r in rows] == [(sent, "json"), (b"\x81", None)]
