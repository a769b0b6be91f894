"""The hostile-client and fuzz harnesses run in CI with small counts (long runs are by hand).

Each exits non-zero when the canary saw a gap, the server crashed, or it wrote a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, missing


def run_bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [["bench/fuzz_faces.py", "--frames", "300"], ["bench/hostile.py", "--quick"]],
    ids=["fuzz_faces", "hostile"],
)
def test_harness_runs_clean(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "crashes 0" in done.stdout or "tracebacks 0" in done.stdout
    assert "canary gaps 0" in done.stdout


@pytest.mark.slow
def test_cluster_bench_runs_every_layout() -> None:
    """``bench/cluster.py`` starts NATS and the nodes, measures, and stops everything."""
    done = run_bench("bench/cluster.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    for layout in ("cluster-2 / single:", "cluster-3 / single:"):
        assert layout in done.stdout


@pytest.mark.slow
def test_cluster_maps_bench_runs_both_layouts() -> None:
    """``bench/cluster_maps.py`` starts NATS and the nodes, measures, and stops everything."""
    done = run_bench("bench/cluster_maps.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    for row in ("cluster-2 APPLIED / single:", "cluster-2 REPLICATED / single:"):
        assert row in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("cluster-2  ")]
    assert len(rows) == 2
    assert all("nan" not in row for row in rows), "a node never applied every op"


@pytest.mark.slow
def test_cluster_maps_held_bench_compares_interest_with_all() -> None:
    """``bench/cluster_maps.py --held --quick``: three nodes, once holding every map and once
    by interest; every op acknowledged (the bench exits non-zero otherwise)."""
    done = run_bench("bench/cluster_maps.py", "--held", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if "maps held," in line]
    assert len(rows) == 6
    interest = [r for r in rows if r.startswith("interest ")]
    assert all("   100 maps held" in r for r in interest)  # a third of 300 each
    assert "interest / all:" in done.stdout


@pytest.mark.slow
def test_cluster_planes_bench_runs_both_layouts_and_counts_every_click() -> None:
    """``bench/cluster_planes.py --quick`` starts NATS and the nodes, measures, stops them."""
    done = run_bench("bench/cluster_planes.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [line for line in lines if line.startswith(("single ", "cluster-2  "))]
    assert len(rows) == 2
    assert all("every click on every node: True" in row for row in rows)
    assert "cluster-2 / single:" in done.stdout


@pytest.mark.slow
def test_cluster_planes_held_bench_compares_interest_with_all() -> None:
    """``bench/cluster_planes.py --held --quick``: three nodes, once holding every document and
    once by interest; every edit acknowledged (the bench exits non-zero otherwise)."""
    done = run_bench("bench/cluster_planes.py", "--held", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("all ", "interest "))]
    assert len([r for r in rows if "documents held" in r]) == 6
    interest = [r for r in rows if r.startswith("interest ") and "documents held" in r]
    assert all("   100 documents held" in r for r in interest)  # a third of 300 each
    assert "interest / all:" in done.stdout


@pytest.mark.slow
def test_crdt_plane_bench_runs_and_loses_no_click() -> None:
    """``bench/crdt_plane.py --quick``: writers, subscribers, a journaled server; a late member's
    counter is the sum of every acknowledged click (the bench exits non-zero otherwise)."""
    done = run_bench("bench/crdt_plane.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clicks lost 0" in done.stdout


@pytest.mark.slow
@pytest.mark.peer
def test_fanout_bench_measures_the_node_peers_in_the_same_run() -> None:
    """``bench/fanout.py`` installs Socket.IO and ``ws`` by npm into its cache folder, runs them
    with the same subscriber processes as octosync's, and prints a ratio against each."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing("node or npm is not installed: the fan-out bench's Node peers are not run")
    argv = ("--subscribers", "20", "--seconds", "1", "--procs", "1", "--json")
    done = run_bench("bench/fanout.py", *argv, "--systems", "octosync,node-socketio,node-ws")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["system"]: r for r in json.loads(done.stdout.splitlines()[-1])}
    assert sorted(rows) == ["node-socketio", "node-ws", "octosync"]
    for row in rows.values():  # every subscriber of every system received deltas
        assert row["deltas_per_s"] > 0
        assert row["resets"] == 0
    for peer in ("node-socketio", "node-ws"):
        assert f"octosync / {peer}: " in done.stdout


@pytest.mark.slow
def test_fanout_bench_paces_every_system_at_each_offered_rate() -> None:
    """``--offered``: every system is also run paced at each rate (same run), and each row says
    what was offered and what fraction of it every subscriber received."""
    argv = ("--subscribers", "20", "--seconds", "1", "--procs", "1", "--json")
    done = run_bench(
        "bench/fanout.py", *argv, "--systems", "octosync,bare", "--offered", "2000,4000"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout.splitlines()[-1])
    paced = sorted((r["offered"], r["system"]) for r in rows if r["offered"])
    assert paced == [(2000, "bare"), (2000, "octosync"), (4000, "bare"), (4000, "octosync")]
    for row in rows:
        assert row["deltas_per_s"] > 0
        assert 0 < row["delivered_pct"] <= 100
    assert "at 4,000/s octosync / bare: p99 " in done.stdout


@pytest.mark.slow
def test_chain_stages_bench_times_every_stage_of_a_link() -> None:
    """``bench/chain_stages.py``: one row per durability and batch size, every stage timed."""
    argv = ("--events", "64", "--batches", "1,8")
    done = run_bench("bench/chain_stages.py", *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| full")]
    rows += [line.split("|") for line in done.stdout.splitlines() if line.startswith("| normal")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [
        ("full", "1"),
        ("full", "8"),
        ("normal", "1"),
        ("normal", "8"),
    ]
    for row in rows:  # six stages and the total, each a positive number of microseconds
        assert all(float(cell) > 0 for cell in row[3:10]), row


@pytest.mark.slow
def test_dataspace_face_bench_loses_no_delivery() -> None:
    """``bench/dataspace_face.py --quick``: lean and syndicate-py clients through the face
    (the bench exits non-zero when an observer missed a synced pair or message)."""
    for clients in ("lean", "syndicate"):
        done = run_bench("bench/dataspace_face.py", "--quick", "--clients", clients)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "deliveries lost 0" in done.stdout


@pytest.mark.slow
def test_remote_writes_bench_answers_writers_on_both_nodes() -> None:
    """``bench/remote_writes.py`` starts NATS, two nodes and the clients, and every writer's
    request on either node is answered applied (a writer asserts it)."""
    done = run_bench("bench/remote_writes.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("node ")]
    assert [r[:2] for r in rows[:2]] == [["node", "1"], ["node", "2"]]
    assert all(float(r[-3]) > 0 for r in rows[:2]), done.stdout
    assert "node 2 / node 1: throughput" in done.stdout


@pytest.mark.slow
def test_lists_bench_runs_beside_yjs() -> None:
    """``bench/lists.py --quick``: one script of list edits into both clients and Yjs, every
    replica ending with the same length (the bench asserts it)."""
    if shutil.which("node") is None:
        missing("node is not on PATH: the lists bench's JS rows need it")
    done = run_bench("bench/lists.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    for row in ("octosync Python", "octosync.js", "Yjs Y.Array"):
        assert row in done.stdout


@pytest.mark.slow
def test_yjs_bench_measures_both_servers() -> None:
    """``bench/yjs_face.py --quick``: each protocol's Node clients against ``/yjs`` and against
    its own server (Hocuspocus with SQLite, y-websocket), paced and unpaced: every row printed
    with its figures, and octosync lost no confirmed update to the SIGKILL after each run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing("node or npm is not installed: the Yjs bench's clients are not run")
    done = run_bench("bench/yjs_face.py", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if " ms  p99 " in line]
    assert len(rows) == 8, done.stdout
    assert all("nan" not in row.lower() for row in rows), done.stdout
    ours = [row for row in rows if row.startswith("octosync")]
    assert len(ours) == 4, done.stdout
    assert all(" 0 of " in row and "lost after SIGKILL" in row for row in ours), done.stdout


@pytest.mark.slow
def test_text_bench_replays_part_of_the_trace_and_a_late_joiner_reads_it() -> None:
    """``bench/text.py`` on the trace's first 20,000 edits: every replay agrees (the bench
    asserts it) and it prints its figures (Yjs beside them when node and npm are here); a
    short run through the servers has every keystroke reach every reader of both."""
    from tests.conftest import trace_file

    trace = trace_file("automerge-paper.json.gz")
    small = ["--serve-seconds", "2", "--docs", "2", "--readers", "2"]
    done = run_bench("bench/text.py", "--trace", str(trace), "--edits", "20000", *small)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "late joiner, octosync:" in done.stdout
    assert "20,000 edits" in done.stdout
    if shutil.which("node") is not None and shutil.which("npm") is not None:
        rows = [line for line in done.stdout.splitlines() if "keystroke to its last reader" in line]
        assert len(rows) == 2, done.stdout
        assert all(" s, 0 not at every reader" in row for row in rows), done.stdout
