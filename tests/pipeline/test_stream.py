"""``octosync pipeline stream``: the compaction and op counts kept by Structured Streaming,
checked against the in-process fold, including after a ``kill -9`` of the stream's driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from octosync.crdt.fold import MapStore, fold
from octosync.crdt.op import OpRecord
from octosync.pipeline.jobs import stream
from octosync.pipeline.jobs.compact import restore_interrupted_swap
from octosync.pipeline.transforms.activity import MINUTE_MS
from octosync.store.journal import Journal
from octosync.store.op_table import op_table
from octosync.store.synthetic import generate_records
from tests.pipeline.helpers import frame

pytestmark = pytest.mark.spark

WAIT = 240.0


def minute_ms(millis: int) -> int:
    return millis - millis % MINUTE_MS


def rows_of(store: MapStore) -> list[tuple[Any, ...]]:
    return [tuple(getattr(r, f) for f in r.__struct_fields__) for r in store.snapshot_rows()]


def table(out: Path, name: str) -> dict[tuple[Any, ...], int]:
    t = pq.read_table(out / "aggregates" / f"{name}.parquet").to_pylist()
    keys = stream.TABLES[name]
    return {tuple(r[k] for k in keys): r["ops"] for r in t}


def assert_matches_the_fold(out: Path, records: list[OpRecord]) -> None:
    """``out`` is the compaction of ``records`` and counts each of them exactly once."""
    meta = json.loads((out / "compaction.json").read_text())
    store = fold(records)
    assert meta["ops"] == len(records)
    assert meta["merkle_roots"] == {m: store.merkle_root(m) for m in store.maps()}
    snapshot = pq.read_table(out / "snapshot").to_pylist()
    assert sorted(tuple(r.values()) for r in snapshot) == sorted(rows_of(store))
    assert table(out, "ops_by_key") == Counter((r.map, r.key) for r in records)
    assert table(out, "ops_by_map") == Counter((minute_ms(r.ts.millis), r.map) for r in records)
    assert table(out, "ops_by_origin") == Counter(
        (minute_ms(r.ts.millis), r.origin) for r in records
    )


def test_an_interrupted_swap_is_put_back(tmp_path: Path) -> None:
    out = tmp_path / "compacted"
    old = tmp_path / ".compacted.old"
    old.mkdir()
    (old / "compaction.json").write_text("{}")
    restore_interrupted_swap(out)
    assert (out / "compaction.json").read_text() == "{}"
    assert not old.exists()
    restore_interrupted_swap(out)  # nothing to do when out is there
    assert out.is_dir()


def test_a_batch_is_applied_once_whatever_reruns(spark: Any, tmp_path: Path) -> None:
    records = generate_records(900, seed=31)
    first, second = op_table(records[:500]), op_table(records[500:], first_seq=501)
    out = tmp_path / "compacted"
    batch0 = spark.createDataFrame(first.to_pandas())
    assert stream.apply_batch(batch0, 0, journal=tmp_path, out=out)
    assert_matches_the_fold(out, records[:500])
    assert not stream.apply_batch(batch0, 0, journal=tmp_path, out=out)  # a rerun after a crash
    assert_matches_the_fold(out, records[:500])
    batch1 = spark.createDataFrame(second.to_pandas())
    assert stream.apply_batch(batch1, 1, journal=tmp_path, out=out)
    assert_matches_the_fold(out, records)
    assert json.loads((out / "compaction.json").read_text())["as_of_seq"] == 900


class Collected:
    """A micro-batch as ``apply_batch`` reads it: collected in one job."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def toArrow(self) -> pa.Table:
        return self.table


def test_tables_a_batch_does_not_add_to_are_kept(tmp_path: Path) -> None:
    records = generate_records(300, seed=5)
    counts = pa.table(
        {
            "table": ["frames_by_stream", "dataspace_by_label"],
            "minute_ms": [60_000, None],
            "k1": ["a", "demo"],
            "k2": [None, "Point"],
            "k3": [None, "assert"],
        },
        schema=pa.schema(
            [("table", pa.string()), ("minute_ms", pa.int64())]
            + [(k, pa.string()) for k in ("k1", "k2", "k3")]
        ),
    )
    first = pa.concat_tables([op_table(records[:100]), counts], promote_options="permissive")
    out = tmp_path / "compacted"
    assert stream.apply_batch(Collected(first), 0, journal=tmp_path, out=out)
    kept = out / "aggregates" / "frames_by_stream.parquet"
    assert stream.apply_batch(Collected(first.slice(101)), 1, journal=tmp_path, out=out)  # no ops
    assert stream.apply_batch(
        Collected(op_table(records[100:], first_seq=101)), 2, journal=tmp_path, out=out
    )
    assert_matches_the_fold(out, records)
    assert pq.read_table(kept).to_pylist() == [{"minute_ms": 60_000, "stream": "a", "events": 1}]
    labels = pq.read_table(out / "aggregates" / "dataspace_by_label.parquet").to_pylist()
    assert labels == [{"dataspace": "demo", "label": "Point", "action": "assert", "events": 2}]


def start_stream(data: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "octosync.cli", "pipeline", "stream", "--journal", str(data)]
    argv += ["--master", "local[1]", "--interval", "0.2", "--max-records-per-batch", "400"]
    return subprocess.Popen(
        [*argv, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the kill takes the driver and its JVM
    )


def wait_for(out: Path, proc: subprocess.Popen[str], done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        meta = stream.read_meta(out) if (out / "compaction.json").exists() else {}
        if meta and done(meta):
            return meta
        if proc.poll() is not None:
            pytest.fail(f"the stream exited: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.2)
    pytest.fail(f"no progress within {WAIT}s")


def restart_until_every_op_is_in(data: Path, n_ops: int) -> None:
    """Start the stream again and stop it once its compaction holds ``n_ops`` ops."""
    restarted = start_stream(data)
    try:
        wait_for(data / "compacted", restarted, lambda m: m["ops"] >= n_ops)
    finally:
        os.killpg(restarted.pid, signal.SIGTERM)
        restarted.wait(60)


def test_kill_9_of_the_driver_mid_run_then_a_restart_counts_every_op_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    records = generate_records(4000, seed=21)
    with Journal(data) as j:
        j.append(records[:2000])
        j.append([frame("a", 0, 0, True)])  # not an op: the stream reads past it
    out = data / "compacted"
    proc = start_stream(data)
    try:
        meta = wait_for(out, proc, lambda m: m["stream_batch"] >= 1)
        with Journal(data) as j:  # the server keeps journaling while the stream runs
            for i in range(2000, 4000, 500):
                j.append(records[i : i + 500])
        meta = wait_for(out, proc, lambda m: m["stream_batch"] >= 3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = meta["ops"]
    assert killed_at < len(records)  # it was killed mid-run
    restart_until_every_op_is_in(data, len(records))
    assert_matches_the_fold(out, records)
    with Journal(data) as j:  # the frame is counted once too
        framed = Counter((minute_ms(e.recorded_ms), "a") for e in j.frames("a"))
    counted = pq.read_table(out / "aggregates" / "frames_by_stream.parquet").to_pylist()
    assert {(r["minute_ms"], r["stream"]): r["events"] for r in counted} == framed


def test_a_trim_while_the_stream_is_down_keeps_what_it_has_not_read(tmp_path: Path) -> None:
    """``kill -9`` of the stream, then a trim of the whole journal (exported, and the op
    records covered as if by a compaction) keeps the records after the stream's committed
    seq; the restarted stream reads them and counts every op once."""
    from octosync.store.export import export, read_watermark

    data = tmp_path / "data"
    records = generate_records(4000, seed=23)
    with Journal(data) as j:
        j.append(records[:2000])
    out = data / "compacted"
    proc = start_stream(data)
    try:
        wait_for(out, proc, lambda m: m["stream_batch"] >= 2)
        with Journal(data) as j:
            j.append(records[2000:])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    committed = stream.committed_seq(data / "stream-checkpoint")
    assert 0 < committed < len(records)  # killed mid-run, with batches committed
    with Journal(data, readonly=True) as j:
        export(j, data / "export")
    watermark = read_watermark(data / "export")
    with Journal(data) as j:
        done = j.trim(len(records) + 1, exported_through=watermark, ops_before=len(records) + 1)
        assert done.held_at == done.before
        assert done.before <= committed + 1  # no record the stream has not read is gone
        assert done.deleted == done.before - 1 > 0
        assert next(r.seq for r in j.read()) == done.before
    restart_until_every_op_is_in(data, len(records))
    assert_matches_the_fold(out, records)


def test_kill_9_of_the_connect_server_mid_run_then_a_restart_counts_every_op_once(
    tmp_path: Path,
) -> None:
    from octosync.pipeline import connect

    data = tmp_path / "data"
    records = generate_records(3000, seed=22)
    with Journal(data) as j:
        j.append(records[:1500])
    out = data / "compacted"

    def serve() -> connect.ServerState:
        return connect.up(data, master="local[1]", port=0, driver_memory="1g", timeout=180.0)

    state = serve()
    try:
        proc = start_stream(data, "--remote", state.url)
        try:
            meta = wait_for(out, proc, lambda m: m["stream_batch"] >= 1)
            with Journal(data) as j:
                j.append(records[1500:])
            meta = wait_for(out, proc, lambda m: m["stream_batch"] >= 2)
            for pid in connect.server_pids(state.pid):
                os.kill(pid, signal.SIGKILL)
            assert proc.wait(120) == 2  # the client says so in one line and exits
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.stderr is not None
        assert proc.stderr.read().strip().splitlines()[-1].startswith("octosync pipeline stream: ")
        assert meta["ops"] < len(records)  # killed mid-run
        state = serve()  # the stale state file is replaced
        restarted = start_stream(data, "--remote", state.url, "--once")
        restarted.wait(WAIT)
        while stream.read_meta(out)["ops"] < len(records):  # --once: one batch per run
            restarted = start_stream(data, "--remote", state.url, "--once")
            assert restarted.wait(WAIT) == 0
    finally:
        connect.down(data, grace=10.0)
    assert_matches_the_fold(out, records)
