from __future__ import annotations

import asyncio
import csv
import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from octosync.cli import main
from octosync.crdt.fold import MapStore, fold
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.pipeline.jobs import compact, report
from octosync.pipeline.resume import load_store
from octosync.pipeline.transforms import lww
from octosync.store.journal import Journal
from octosync.store.records import StreamFrame
from octosync.store.synthetic import generate_records

pytestmark = pytest.mark.spark


def rows_of(store: MapStore) -> list[tuple[Any, ...]]:
    return [tuple(getattr(r, f) for f in r.__struct_fields__) for r in store.snapshot_rows()]


def spark_rows(spark: Any, out: Path) -> list[tuple[Any, ...]]:
    df = spark.read.parquet(str(out / "snapshot")).orderBy("map", "key", "tombstone", "value")
    return [tuple(r) for r in df.collect()]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[OpRecord]]:
    data = tmp_path_factory.mktemp("data")
    records = generate_records(3000, seed=7)
    with Journal(data) as j:
        for i in range(0, len(records), 500):
            j.append(records[i : i + 500])
    return data, records


def test_compact_cli_equals_the_fold_and_resumes_from_the_tail(
    spark: Any, journal: tuple[Path, list[OpRecord]], tmp_path: Path
) -> None:
    data, records = journal
    out = tmp_path / "compacted"
    assert main(["pipeline", "compact", "--journal", str(data), "--out", str(out)]) == 0
    meta = json.loads((out / "compaction.json").read_text())
    store = fold(records)
    assert meta["as_of_seq"] == len(records)
    assert meta["merkle_roots"] == {m: store.merkle_root(m) for m in store.maps()}
    assert sorted(spark_rows(spark, out), key=repr) == sorted(rows_of(store), key=repr)

    resumed, last = load_store(out)
    assert last == len(records)
    assert rows_of(resumed) == rows_of(store)
    more = generate_records(300, seed=8)
    tail_copy = data.parent / "data-with-tail"
    with Journal(tail_copy) as j:
        j.append(records)
        j.append(more)
    resumed, last = load_store(out, tail_copy)
    assert last == len(records) + len(more)
    everything = fold(records + more)
    assert rows_of(resumed) == rows_of(everything)
    assert all(resumed.merkle_root(m) == everything.merkle_root(m) for m in everything.maps())


def test_compact_as_of_and_gc_horizon(
    spark: Any, journal: tuple[Path, list[OpRecord]], tmp_path: Path
) -> None:
    data, records = journal
    result = compact.run(spark, data, tmp_path / "early", as_of_seq=1000)
    early = fold(records[:1000])
    assert result.as_of_seq == 1000
    assert result.roots == {m: early.merkle_root(m) for m in early.maps()}

    full = fold(records)
    tombs = [r for r in full.snapshot_rows() if r.tombstone]
    assert tombs, "the generated history has deletes"
    horizon = sorted(r.millis for r in tombs)[len(tombs) // 2]
    result = compact.run(spark, data, tmp_path / "gc", gc_horizon_millis=horizon)
    kept = [r for r in rows_of(full) if not (r[6] and r[3] < horizon)]
    assert sorted(spark_rows(spark, tmp_path / "gc"), key=repr) == sorted(kept, key=repr)
    for m in full.maps():
        tree = full.merkle(m).copy()
        for r in tombs:
            if r.map == m and r.millis < horizon:
                tree.remove(r.key)
        assert result.roots[m] == tree.root()


def records_of(out: Path) -> list[tuple[Any, ...]]:
    import pyarrow.parquet as pq

    return sorted(tuple(r.values()) for r in pq.read_table(out / "records").to_pylist())


def test_compact_writes_the_same_outputs_from_spark_and_from_the_driver(
    spark: Any,
    journal: tuple[Path, list[OpRecord]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, records = journal
    horizon = sorted(r.ts.millis for r in records)[len(records) // 2]
    on_driver = compact.run(spark, data, tmp_path / "driver", gc_horizon_millis=horizon)
    monkeypatch.setattr(lww, "DRIVER_MERKLE_KEYS", 0)  # every LWW output written by Spark
    in_spark = compact.run(spark, data, tmp_path / "spark", gc_horizon_millis=horizon)
    assert (in_spark.rows, in_spark.roots) == (on_driver.rows, on_driver.roots)
    assert spark_rows(spark, tmp_path / "spark") == spark_rows(spark, tmp_path / "driver")
    assert records_of(tmp_path / "spark") == records_of(tmp_path / "driver")
    assert (tmp_path / "driver" / "snapshot" / compact.DRIVER_PART).exists()
    assert not (tmp_path / "spark" / "snapshot" / compact.DRIVER_PART).exists()


def test_compact_of_a_missing_journal_names_input_and_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["pipeline", "compact", "--journal", str(tmp_path / "absent"), "--out", str(tmp_path / "o")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"--journal {tmp_path / 'absent'} does not exist" in err  # refused before Spark
    assert not (tmp_path / "o").exists()


def test_report_writes_page_charts_and_tables(
    spark: Any, journal: tuple[Path, list[OpRecord]], tmp_path: Path
) -> None:
    data, records = journal
    result = report.run(spark, data, tmp_path / "report", top=5)
    distinct = {r.op_id: r for r in records}
    assert result.ops == len(distinct)
    page = (tmp_path / "report" / "index.html").read_text()
    for chart in result.charts:
        assert f'src="{chart}"' in page
        assert (tmp_path / "report" / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = Counter((r.map, r.key) for r in distinct.values())
    with (tmp_path / "report" / "hottest_keys.csv").open() as f:
        hot = [(row["map"], row["key"], int(row["ops"])) for row in csv.DictReader(f)]
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert hot == [(m, k, n) for (m, k), n in best]
    with (tmp_path / "report" / "ops_over_time_by_origin.csv").open() as f:
        assert sum(int(row["ops"]) for row in csv.DictReader(f)) == len(distinct)
    millis = [r.ts.millis for r in distinct.values()]
    assert result.axes["ops_per_second_by_map.png"] == (min(millis), max(millis))
    assert "Stream frames" in page
    assert "No stream frames" in page


T0 = int(datetime(2026, 3, 4, 10, 0, tzinfo=UTC).timestamp() * 1000)


def frame(stream: str, base: int, epoch: int, producer: str | None) -> StreamFrame:
    return StreamFrame(stream, base, epoch, base == epoch, b"p", producer=producer)


def test_report_real_times_partial_minutes_sections_and_stream_traffic(
    spark: Any, tmp_path: Path
) -> None:
    now = [T0 + 20_000]  # the journal's clock: each frame's recorded_ms
    data = tmp_path / "data"
    s1 = [
        frame("board", 0, 0, "r.1"),
        frame("board", 0, 1, "r.1"),
        frame("board", 1, 2, "r.1"),
        frame("board", 2, 2, "r.1"),  # the same producer's second snapshot: a resync
        frame("board", 2, 3, "r.1"),
        frame("board", 3, 3, "r.2"),  # a second producer takes over
        frame("board", 3, 4, "r.2"),
    ]
    s2 = [frame("lobby", 0, 0, None), frame("lobby", 0, 1, None), frame("lobby", 5, 5, None)]
    ops = [
        OpRecord(
            "m",
            f"k{i % 3}",
            OpKind.PUT,
            b"\xa1v",
            Timestamp(T0 + 5_000 + i * 37_000, 0, "n"),
            "o",
            f"op{i}",
        )
        for i in range(8)
    ]  # HLC times 10:00:05 .. 10:04:24
    with Journal(data, clock=lambda: now[0]) as j:
        for f in s1 + s2:
            j.append([f])
            now[0] += 25_000  # ten frames over 10:00:20 .. 10:04:05
        j.append(ops)
    out = tmp_path / "report"
    result = report.run(spark, data, out)
    frame_times = [T0 + 20_000 + 25_000 * i for i in range(len(s1) + len(s2))]
    assert result.axes["frames_per_second_by_stream.png"] == (frame_times[0], frame_times[-1])
    assert result.axes["ops_per_second_by_map.png"] == (T0 + 5_000, T0 + 5_000 + 7 * 37_000)
    assert result.streams == ["board", "lobby"]
    with (out / "streams.csv").open() as f:
        streams = {row["stream"]: row for row in csv.DictReader(f)}
    board, lobby = streams["board"], streams["lobby"]
    assert (board["frames"], board["snapshots"], board["producers"], board["resyncs"]) == (
        "7",
        "3",
        "2",
        "1",
    )
    assert (lobby["frames"], lobby["producers"], lobby["resyncs"]) == ("3", "1", "1")
    assert board["first"] == "2026-03-04 10:00:20 UTC"
    with (out / "frames_over_time_by_stream.csv").open() as f:
        minutes = [(r["bucket"], r["stream"], r["frames"], r["partial"]) for r in csv.DictReader(f)]
    assert [m for m in minutes if m[1] == "board"] == [
        ("2026-03-04T10:00Z", "board", "2", "True"),  # 10:00:20 .. 10:01:00: partial
        ("2026-03-04T10:01Z", "board", "2", "False"),
        ("2026-03-04T10:02Z", "board", "3", "False"),
        ("2026-03-04T10:03Z", "board", "0", "False"),  # a real zero: lobby's turn
        ("2026-03-04T10:04Z", "board", "0", "True"),  # up to 10:04:05: partial
    ]
    page = (out / "index.html").read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings == [
        "Shared documents",
        "CRDT ops",
        "Hottest keys",
        "Concurrent writes",
        "Stream frames",
        "Chains",
        "Dataspaces",
        "Yjs documents",
    ]
    assert "No Yjs updates in this journal" in page  # this journal has none
    assert "1970" not in page
    assert "from 2026-03-04 10:00:20 UTC to 2026-03-04 10:04:05 UTC" in page
    assert "Partial buckets (each a minute;" in page
    assert "2026-03-04 10:04" in page
    for chart in result.charts:
        assert f'src="{chart}"' in page


async def test_report_lists_the_streams_of_a_journal_written_by_a_real_server(
    spark: Any, tmp_path: Path
) -> None:
    import aiohttp

    from tests.e2e.helpers import delta, serve, snap, ws_lazily

    data = tmp_path / "data"
    async with serve(data, journal=True) as srv, aiohttp.ClientSession() as http:
        for stream, producers in (("board", 2), ("lobby", 1)):
            for _ in range(producers):  # a second producer takes over after the first left
                prod, reply = await ws_lazily(http, srv.ws_url, stream, publish=True)
                assert reply.get("type") != "error", reply
                await prod.send_bytes(snap(0, {1: b"a"}))
                for epoch in range(3):
                    await prod.send_bytes(delta(epoch, 1, b"v%d" % epoch))
                await prod.close()
                for _ in range(500):  # until the hub has seen the producer leave
                    if srv.runtime.hub.producer_of(stream) is None:
                        break
                    await asyncio.sleep(0.01)
    result = report.run(spark, data, tmp_path / "report")
    assert result.streams == ["board", "lobby"]
    with (tmp_path / "report" / "streams.csv").open() as f:
        streams = {row["stream"]: row for row in csv.DictReader(f)}
    assert {s: (r["frames"], r["producers"], r["resyncs"]) for s, r in streams.items()} == {
        "board": ("8", "2", "0"),
        "lobby": ("4", "1", "0"),
    }
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<td>board</td>" in page
    assert "<td>lobby</td>" in page
    assert "No CRDT ops in this journal." in page
