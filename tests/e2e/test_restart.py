"""A real server killed with SIGKILL while a producer publishes, then started again on the same
``--data``: a late joiner gets the state after the last frame the journal acknowledged.

Hypothesis draws the producer's history, where the kill lands in it, and how often the server
runs its maintenance round (checkpoint, export, trim), so kills also land inside those writes.
Bounded: a handful of examples, each two server processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from octosync.errors import OctosyncError
from octosync.ipc.messages import CellSet, Delta, NodeAdd, NodeSnapshot, Snapshot
from octosync.ipc.mirror import Applied, Mirror
from octosync.store.journal import Journal
from octosync.store.records import KIND_DROP, StreamFrame
from tests.e2e.helpers import TIMEOUT, free_port, ws_lazily

STREAM = "board"


def start_server(
    data: Path, port: int, interval: float, extra: str = ""
) -> subprocess.Popen[bytes]:
    config = data.parent / f"{data.name}.toml"
    config.write_text(f"[server]\ncheckpoint_interval = {interval}\n{extra}")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "octosync.cli",
            "serve",
            "--insecure-dev",
            "--port",
            str(port),
            "--data",
            str(data),
            "--config",
            str(config),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def wait_ready(http: aiohttp.ClientSession, port: int) -> None:
    for _ in range(200):  # bounded: 10 s
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError("server did not come up")


def history(steps: list[tuple[int, bytes, int]]) -> list[Snapshot | Delta]:
    """A snapshot of two nodes, then one write per step (a new node, or a value; some deltas
    span several epochs, as lazily-spec's coalescing producers send them)."""
    out: list[Snapshot | Delta] = [
        Snapshot(0, (NodeSnapshot(1, "b", "resolved", b"a"), NodeSnapshot(2, "b", "resolved", b"")))
    ]
    nodes, epoch = {1, 2}, 0
    for node, value, span in steps:
        op = CellSet(node, value) if node in nodes else NodeAdd(node, "b", value)
        nodes.add(node)
        out.append(Delta(epoch, epoch + span, (op,)))
        epoch += span
    return out


async def journaled(data: Path) -> None:
    """Until the journal holds the stream's snapshot (bounded: 10 s)."""
    for _ in range(200):
        with contextlib.suppress(OctosyncError), Journal(data, readonly=True) as journal:
            if next(journal.frames(STREAM), None) is not None:
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the snapshot never reached the journal")


async def produce_and_kill(
    port: int,
    proc: subprocess.Popen[bytes],
    data: Path,
    msgs: list[Snapshot | Delta],
    kill_at: int,
    pause: float,
) -> None:
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, port)
        ws, _ = await ws_lazily(http, f"ws://127.0.0.1:{port}", STREAM, publish=True)
        await ws.send_bytes(msgspec.json.encode(msgs[0]))
        await journaled(data)  # kill points fall among the deltas
        for i, msg in enumerate(msgs[1:], start=1):
            if i == kill_at:
                await asyncio.sleep(pause)  # lets some of what was sent reach the journal
                proc.send_signal(signal.SIGKILL)  # the producer keeps publishing
            try:
                await ws.send_bytes(msgspec.json.encode(msg))
            except (ConnectionError, aiohttp.ClientError):
                break
        with contextlib.suppress(Exception):
            await ws.close()


async def late_joiner_snapshot(port: int) -> Snapshot:
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, port)
        ws, _ = await ws_lazily(http, f"ws://127.0.0.1:{port}", STREAM)
        msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
        await ws.close()
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return msgspec.json.decode(msg.data, type=Snapshot)


def acknowledged_epoch(data: Path) -> int:
    """The epoch of the stream's last frame the journal committed before the kill."""
    with Journal(data) as journal:
        frames = [e.record for e in journal.frames(STREAM)]
        checkpoint = journal.checkpoints().get(STREAM)
    epochs = [f.epoch for f in frames if isinstance(f, StreamFrame)]
    if checkpoint is not None and checkpoint.epoch is not None:
        epochs.append(checkpoint.epoch)  # frames it covers may have been trimmed already
    assert epochs, "the snapshot is acknowledged before the kill"
    return max(epochs)


@pytest.mark.slow
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 5), st.binary(max_size=4), st.sampled_from([1, 1, 1, 2, 3])),
        min_size=1,
        max_size=300,
    ),
    kill_frac=st.floats(0.05, 1.0),
    interval=st.sampled_from([0.02, 0.1, 30.0]),
    pause=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_kill_9_then_restart_serves_the_acknowledged_state(
    tmp_path_factory: object,
    steps: list[tuple[int, bytes, int]],
    kill_frac: float,
    interval: float,
    pause: float,
) -> None:
    base = Path(tempfile_dir(tmp_path_factory))
    data = base / "data"
    msgs = history(steps)
    kill_at = max(1, int(kill_frac * len(msgs)))  # the snapshot always goes out first
    port = free_port()
    first = start_server(data, port, interval)
    try:
        asyncio.run(produce_and_kill(port, first, data, msgs, kill_at, pause))
        if first.poll() is None:  # the history ended before the kill point
            first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    epoch = acknowledged_epoch(data)
    expected = Mirror()
    for msg in msgs:
        if msg.epoch > epoch:
            break
        assert isinstance(expected.apply(msg), Applied)
    assert expected.last_epoch == epoch  # the journal acknowledged a frame boundary
    port = free_port()
    second = start_server(data, port, interval)
    try:
        snap = asyncio.run(late_joiner_snapshot(port))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=10)
    err = second.stderr.read().decode() if second.stderr else ""
    shutil.rmtree(base, ignore_errors=True)
    assert "Traceback" not in err, err
    assert snap.epoch == epoch
    assert snap.nodes == expected.snapshot().nodes


async def publish_then_leave_until_dropped(port: int, data: Path) -> None:
    """A producer publishes and leaves; returns once the journal says the hub let the state go
    (bounded: 10 s)."""
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, port)
        ws, _ = await ws_lazily(http, f"ws://127.0.0.1:{port}", STREAM, publish=True)
        await ws.send_bytes(msgspec.json.encode(history([(3, b"x", 1)])[0]))
        await journaled(data)
        await ws.close()
    for _ in range(200):
        with contextlib.suppress(OctosyncError), Journal(data, readonly=True) as journal:
            if journal.scoped_rows(KIND_DROP, STREAM, 1, journal.latest_seq()):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the hub never journaled the drop")


async def streams_served(port: int) -> list[str]:
    async with aiohttp.ClientSession() as http:
        await wait_ready(http, port)
        async with http.get(f"http://127.0.0.1:{port}/api/streams") as resp:
            body = await resp.json()
    return [row["stream"] for row in body["streams"]]


@pytest.mark.slow
def test_a_stream_the_hub_let_go_stays_gone_after_a_kill_9(tmp_path_factory: object) -> None:
    base = Path(tempfile_dir(tmp_path_factory))
    data = base / "data"
    port = free_port()
    first = start_server(data, port, 30.0, "[hub]\nretain_seconds = 0.2\n")
    try:
        asyncio.run(publish_then_leave_until_dropped(port, data))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    port = free_port()
    second = start_server(data, port, 30.0)
    try:
        served = asyncio.run(streams_served(port))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=10)
    shutil.rmtree(base, ignore_errors=True)
    assert STREAM not in served


def tempfile_dir(factory: object) -> str:
    """On tmpfs when there is one: a SIGKILL loses the same things there as on a disk (only
    what was never written), and the server's fsyncs do not make the test wait on the disk."""
    shm = Path("/dev/shm")
    if shm.is_dir():
        return tempfile.mkdtemp(prefix="restart-e2e-", dir=shm)
    mk = factory.mktemp  # type: ignore[attr-defined]
    return str(mk("restart"))
