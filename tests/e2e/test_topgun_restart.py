"""TopGun's maps restart from a real ``pipeline compact`` output plus the journal's tail, after
the journal's op records were trimmed, and come back with the Merkle roots they had; without
the compaction the server refuses to start rather than serve maps with a hole."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from octosync.crdt.sync_messages import SyncInit, SyncRespRoot
from octosync.pipeline.layout import SERVER_COMPACTION_SUBDIR
from octosync.store.export import read_watermark
from octosync.store.journal import Journal
from octosync.wire import topgun as tg
from octosync.wire.topgun_services import OrMapSyncInit
from tests.e2e.helpers import free_port, spawn_server
from tests.e2e.test_topgun_face import _device, _lock, recv
from tests.topgun.helpers import batch, or_add, or_remove, put

Roots = tuple[int, int]


async def roots(ws: aiohttp.ClientWebSocketResponse) -> Roots:
    """The LWW map ``users`` and the OR map ``tags`` as the server's Merkle roots."""
    await ws.send_bytes(tg.encode(SyncInit(map_name="users")))
    lww = await recv(ws)
    assert isinstance(lww, SyncRespRoot), lww
    await ws.send_bytes(tg.encode(OrMapSyncInit(map_name="tags", root_hash=0, bucket_hashes={})))
    orm = await recv(ws)
    assert isinstance(orm, tg.ORMapSyncRespRoot), orm
    return int(lww.payload.root_hash), int(orm.payload.root_hash)


async def persisted(ws: aiohttp.ClientWebSocketResponse, *ops: tg.ClientOp) -> None:
    await ws.send_bytes(tg.encode(batch(*ops, write_concern="PERSISTED")))
    ack = await recv(ws)
    assert isinstance(ack, tg.OpAck), ack
    assert ack.payload.achieved_level == "PERSISTED"


@pytest.fixture
def spark() -> Iterator[Any]:
    from octosync.pipeline.spark import build_session

    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    session = build_session("local[1]", conf, app_name="octosync-topgun-restart")
    yield session
    session.stop()


@pytest.mark.spark
@pytest.mark.slow
async def test_maps_restart_from_the_compaction_and_the_journal_tail(
    tmp_path: Path, spark: Any
) -> None:
    from octosync.pipeline.jobs import compact

    async with spawn_server(tmp_path) as first, aiohttp.ClientSession() as http:
        ws = await _device(http, first.url)
        token = await _lock(ws, "r1", "printer")
        state = tg.CounterState.of({"n1": 4}, {"n2": 1})
        await ws.send_bytes(tg.encode(tg.CounterSync(tg.CounterStatePayload("likes", state))))
        assert isinstance(await recv(ws), tg.CounterUpdate)
        lww = [put(str(i), f"u{i % 7}", {"n": i}, 1_000 + i) for i in range(40)]
        lww.append(put("40", "u3", None, 2_000))  # a tombstone the compaction keeps
        await persisted(ws, *lww)
        tag = "1000:0:n1"
        await persisted(ws, or_add("41", "post", "go", 1_000), or_add("42", "post", "py", 1_001))
        await persisted(ws, or_remove("43", "post", tag, 1_002))
        before = await roots(ws)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()

    out = tmp_path / SERVER_COMPACTION_SUBDIR
    result = await asyncio.to_thread(compact.run, spark, tmp_path, out)
    with Journal(tmp_path) as journal:
        ops = len(list(journal.all_ops()))
        watermark = read_watermark(tmp_path / "export")
        journal.trim(watermark + 1, exported_through=watermark, ops_before=result.as_of_seq + 1)
        assert ops == 46  # 44 map ops, a fencing token, a counter
        assert list(journal.all_ops()) == []  # only the compaction holds them now

    async with spawn_server(tmp_path) as second, aiohttp.ClientSession() as http:
        ws = await _device(http, second.url)
        assert await roots(ws) == before  # from the compaction alone
        await persisted(ws, put("1", "u1", "tail", 3_000), put("2", "u2", None, 3_001))
        await persisted(ws, or_remove("3", "post", "1001:0:n1", 3_002))
        await persisted(ws, or_add("4", "post", "rs", 3_003))
        tail = await roots(ws)
        assert tail != before
        second.proc.send_signal(signal.SIGKILL)
        second.proc.wait()

    async with spawn_server(tmp_path) as third, aiohttp.ClientSession() as http:
        ws = await _device(http, third.url)
        assert await roots(ws) == tail  # the compaction, then the journal's tail
        assert await _lock(ws, "r2", "printer") > token  # the token's record was compacted
        await ws.send_bytes(tg.encode(tg.CounterRequest(tg.CounterName("likes"))))
        reply = await recv(ws)
        assert isinstance(reply, tg.CounterResponse)
        assert reply.payload.state.sides() == ({"n1": 4}, {"n2": 1})
        await ws.close()


async def test_a_server_whose_op_records_were_trimmed_needs_the_compaction(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as first, aiohttp.ClientSession() as http:
        ws = await _device(http, first.url)
        await persisted(ws, put("1", "u1", 1, 1_000), put("2", "u2", 2, 1_001))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    with Journal(tmp_path) as journal:  # trimmed as if a compaction had covered them
        journal.trim(3, exported_through=2, ops_before=3)
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"],
        *["--port", str(free_port()), "--data", str(tmp_path)],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode != 0
    assert b"op records below seq 3 were trimmed" in err
    assert str(tmp_path / SERVER_COMPACTION_SUBDIR).encode() in err
