"""Chain and dataspace activity from real servers and clients reaches the pipeline.

A real NATS server, a real chain link process running the example game, an ``octosync
serve`` (in process, real sockets) with its chain face and dataspace face and a journal; two
WebSocket devices play through the face (one later bootstraps again, re-sending an event the
chain already consumed) and a real syndicate-py program asserts, sends, retracts and is
killed. Then ``report`` and one ``stream`` batch run in a real SparkSession on the journal the
server wrote. What the clients did is checked against the journal, and every table against
an independent fold of the journal in plain Python.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pyarrow.parquet as pq
import pytest

from octosync.links.cli import start_node
from octosync.pipeline.jobs import report, stream
from octosync.pipeline.transforms.activity import MINUTE_MS
from octosync.server.dataspace_state import dataspace_state
from octosync.store.journal import Journal
from octosync.store.records import ChainEventSeen, ChainStateSeen, DataspaceEvent
from octosync.syndicate import mint_text
from tests.e2e.helpers import TIMEOUT, serve
from tests.e2e.helpers import chain_record as receive

pytestmark = pytest.mark.spark

CHAIN = "game"
SECRET = b"activity-test-secret-0123456789a"
PEER = Path(__file__).resolve().parents[1] / "e2e" / "syndicate_peer.py"
ROOT = Path(__file__).resolve().parents[2]
PLAYS = {
    "alice": [("join", {"name": "Alice"})]
    + [("move", {"dx": 1, "dy": 0})] * 6
    + [("score", {"points": 2})] * 4,
    "bob": [("join", {"name": "Bob"})]
    + [("move", {"dx": 0, "dy": 1})] * 3
    + [("score", {"points": 1})] * 7,
}


def bootstrap(next_seq: int, events: dict[int, Any] | None = None) -> str:
    request: dict[str, Any] = {"Type": "BootstrapChainRequest", "NextDeviceSequencer": next_seq}
    if events:
        request["Events"] = {str(k): v for k, v in events.items()}
    return json.dumps(request)


def device_event(seq: int, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "DeviceEvent",
        "DeviceSequencer": seq,
        "Name": name,
        "Payload": json.dumps(payload),
    }


async def play(http: aiohttp.ClientSession, base: str, device: str) -> None:
    """Send the device's events; return once the chain consumed every one of them."""
    events = PLAYS[device]
    async with http.ws_connect(f"{base}?device={device}") as ws:
        await ws.send_str(bootstrap(1))
        await receive(ws, "BootstrapComplete")
        for seq, (name, payload) in enumerate(events, 1):
            await ws.send_str(json.dumps(device_event(seq, name, payload)))
        while True:  # the game's audit counts each device's consumed events
            change = (await receive(ws, "StateUpdate"))["Change"]
            if change.get("audit", {}).get(device, {}).get("n") == len(events):
                return


async def rejoin_resending_the_first_event(http: aiohttp.ClientSession, base: str) -> None:
    """A device that lost track re-sends an event the chain consumed long ago: the head kills
    it, and the face journals it a second time."""
    name, payload = PLAYS["alice"][0]
    async with http.ws_connect(f"{base}?device=alice") as ws:
        await ws.send_str(bootstrap(len(PLAYS["alice"]) + 1, {1: device_event(1, name, payload)}))
        complete = await receive(ws, "BootstrapComplete")
        assert complete["Kill"] == [1]


async def run_the_syndicate_peer(server: Any) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEER),
        "publish",
        f'<tcp "127.0.0.1" {server.dataspace_port}>',
        mint_text(SECRET, "demo"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        lines = [json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))]
        lines.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)))
        assert lines == [["synced"], ["done"]]
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # what it still asserts is retracted at the close
        await proc.wait()
    space = dataspace_state(server.runtime).relay.dataspace("demo").space
    for _ in range(200):
        if len(space) == 0:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the killed peer's assertions were never retracted")


async def write_the_journal(nats_url: str, data: Path) -> None:
    link, _ = await asyncio.to_thread(
        start_node, CHAIN, "n1", nats_url, "octosync.chain.game:compute", data.parent / "n1"
    )
    try:
        async with (
            serve(
                data,
                journal=True,
                chain_config=nats_url,
                dataspace_port=0,
                dataspace_secret=SECRET,
            ) as server,
            aiohttp.ClientSession() as http,
        ):
            base = f"{server.url}/chain/{CHAIN}"
            await asyncio.gather(play(http, base, "alice"), play(http, base, "bob"))
            await rejoin_resending_the_first_event(http, base)
            await run_the_syndicate_peer(server)
    finally:
        link.kill()
        link.wait(timeout=10)


def journal_records(data: Path) -> list[tuple[int, int, Any]]:
    with Journal(data, readonly=True) as journal:
        return [(e.seq, e.recorded_ms, e.record) for e in journal.read()]


def fold_latency(entries: list[tuple[int, int, Any]]) -> dict[tuple[str, str], list[int]]:
    """Per (chain, name): each event's latency, from its first record to the first record of
    the first state change that consumed it (plain Python over the journal)."""
    seen: dict[tuple[str, str, int], tuple[int, str]] = {}
    states: dict[tuple[str, int], tuple[int, int, ChainStateSeen]] = {}
    for seq, ms, rec in entries:
        if isinstance(rec, ChainEventSeen):
            seen.setdefault((rec.chain, rec.device, rec.device_sequencer), (ms, rec.name))
        elif isinstance(rec, ChainStateSeen):
            states.setdefault((rec.chain, rec.sequencer), (seq, ms, rec))
    consumed: dict[tuple[str, str, int], tuple[int, int]] = {}
    for (chain, _), (seq, ms, rec) in states.items():
        for device, seqs in rec.consumed.items():
            for s in seqs:
                key = (chain, device, s)
                if key not in consumed or consumed[key][0] > seq:
                    consumed[key] = (seq, ms)
    out: dict[tuple[str, str], list[int]] = {}
    for key, (_, state_ms) in consumed.items():
        if key in seen:
            event_ms, name = seen[key]
            out.setdefault((key[0], name), []).append(state_ms - event_ms)
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def aggregate(out: Path, name: str) -> dict[tuple[Any, ...], int]:
    keys = stream.ACTIVITY_TABLES[name]
    rows = pq.read_table(out / stream.AGGREGATES_DIR / f"{name}.parquet").to_pylist()
    return {tuple(r[k] for k in keys): r["events"] for r in rows}


async def test_chain_and_dataspace_activity_reaches_report_and_stream(
    spark: Any, nats_url: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    await write_the_journal(nats_url, data)
    entries = journal_records(data)
    events = [r for _, _, r in entries if isinstance(r, ChainEventSeen)]
    spaces = [r for _, _, r in entries if isinstance(r, DataspaceEvent)]

    # The journal holds what the clients did.
    sent = Counter((d, name) for d, plays in PLAYS.items() for name, _ in plays)
    assert Counter((e.device, e.name) for e in events) == sent + Counter({("alice", "join"): 1})
    assert Counter((s.label, s.action) for s in spaces) == Counter(
        {
            ("Point", "assert"): 3,
            ("Point", "retract"): 3,  # one by the peer, two when it was killed
            ("Other", "assert"): 1,
            ("Other", "retract"): 1,
            ("Ping", "message"): 2,
            ("Pong", "message"): 1,
        }
    )
    assert {s.value for s in spaces if s.action == "assert"} == {
        '<Point 1 1 "a">',
        '<Point 2 2 "b">',
        '<Point 3 1 "c">',
        '<Other 1 1 "d">',
    }
    latencies = fold_latency(entries)
    assert Counter({k: len(v) for k, v in latencies.items()}) == Counter(
        (CHAIN, name) for (_, name) in sent.elements()
    )  # every event the devices sent was consumed by a state change the face saw

    # report: distinct events, per device and name; latency; dataspace per label.
    out = tmp_path / "report"
    result = await asyncio.to_thread(report.run, spark, data, out)
    assert (result.chain_events, result.dataspace_events) == (len(events) - 1, len(spaces))
    assert result.chain_states == len(
        {(r.chain, r.sequencer) for _, _, r in entries if isinstance(r, ChainStateSeen)}
    )
    by_device = {
        r["device"]: int(r["events"]) for r in read_csv(out / "chain_events_by_device.csv")
    }
    assert by_device == {d: len(p) for d, p in PLAYS.items()}
    by_name = {
        r["name"]: (int(r["events"]), int(r["devices"]))
        for r in read_csv(out / "chain_events_by_name.csv")
    }
    assert by_name == {"join": (2, 2), "move": (9, 2), "score": (11, 2)}
    latency = {r["name"]: r for r in read_csv(out / "chain_latency_by_name.csv")}
    assert set(latency) == {name for _, name in latencies}
    for (_, name), values in latencies.items():
        row = latency[name]
        assert int(row["consumed"]) == len(values)
        assert float(row["p50_ms"]) == pytest.approx(np.percentile(values, 50))
        assert float(row["p99_ms"]) == pytest.approx(np.percentile(values, 99))
        assert int(row["max_ms"]) == max(values)
    labels = {r["label"]: r for r in read_csv(out / "dataspace_by_label.csv")}
    assert {
        k: (int(r["asserts"]), int(r["retracts"]), int(r["messages"])) for k, r in labels.items()
    } == {"Point": (3, 3, 0), "Other": (1, 1, 0), "Ping": (0, 0, 2), "Pong": (0, 0, 1)}
    assert int(labels["Point"]["retracted"]) == 3
    assert "Chains" in (out / "index.html").read_text()

    # stream: one batch of everything; the tables count journal records (the re-sent
    # event counts twice), and a batch without ops still swaps its tables in.
    compacted, checkpoint = tmp_path / "compacted", tmp_path / "checkpoint"
    query = stream.start(spark, data, compacted, checkpoint, once=True)
    await asyncio.to_thread(stream.wait_until_done, query)
    assert stream.read_meta(compacted)[stream.BATCH_FIELD] == 0
    assert stream.read_meta(compacted)["ops"] == 0
    by_min = Counter(
        (ms - ms % MINUTE_MS, r.chain) for _, ms, r in entries if isinstance(r, ChainStateSeen)
    )
    assert aggregate(compacted, "chain_events_by_device") == Counter(
        (e.chain, e.device) for e in events
    )
    assert aggregate(compacted, "chain_events_by_name") == Counter(
        (e.chain, e.name) for e in events
    )
    assert aggregate(compacted, "chain_states_by_minute") == by_min
    assert aggregate(compacted, "dataspace_by_label") == Counter(
        (s.dataspace, s.label, s.action) for s in spaces
    )
