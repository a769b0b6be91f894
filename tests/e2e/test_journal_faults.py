"""Journal faults against a real server process: a full disk (a small tmpfs), immutable files
(``chattr +i``), a second server on the same folder, and ``kill -9`` while it lasts.

What must hold: an ack says the write is journaled, so after a restart every acknowledged
write is there; while the journal cannot commit, writes are refused with a typed error (never
acknowledged), ``/healthz`` says ``degraded``, and service resumes by itself. The full-disk
tests turn the disk rule off (``RULE_OFF``): their subject is a disk that fills behind the
server's back, which only the journal's own commits find out (with the rule on, writes are
refused before the disk is full: ``tests/e2e/test_storage_rules.py``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import msgspec
import pytest

from octosync.crdt.sync_messages import WireTimestamp
from octosync.ipc.messages import Snapshot
from octosync.store.journal import Journal
from octosync.topgun import TopGunCore
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th
from tests.e2e.helpers import delta, free_port, handshake, refusal, snap, spawn_server
from tests.e2e.test_topgun_face import _device
from tests.store.faults import fill, journal_files, need_root, set_immutable, small_disk
from tests.topgun.helpers import Clock, batch, put

pytestmark = pytest.mark.slow
SERVE = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
WAIT = 10.0
RULE_OFF = "[storage]\nmin_free_disk_percent = 0\n"
"""A config file that lets the journal itself meet the full disk."""
VALUE = "v" * 2000
"""Op values large enough that a few hundred fill a small disk."""


async def _health(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, str]]:
    async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
        return r.status, await r.json()


async def _send_persisted(
    http: aiohttp.ClientSession, url: str, message: tg.OpBatch
) -> tuple[bool, str]:
    """One batch on a fresh connection, as TopGun's client resends after a reset: (acked,
    what came back)."""
    ws = await _device(http, url)
    try:
        await ws.send_bytes(tg.encode(message))
        while True:  # other writers' events may come first
            got = await asyncio.wait_for(ws.receive(), WAIT)
            if got.type != aiohttp.WSMsgType.BINARY:
                return False, f"closed {ws.close_code}"
            reply = tg.decode(got.data)
            if not isinstance(reply, tg.ServerBatchEvent | tg.ServerEvent):
                break
        if isinstance(reply, tg.OpAck):
            assert reply.payload.achieved_level == "PERSISTED", reply
            return True, "ack"
        assert isinstance(reply, tg.Error), reply
        name = msgspec.msgpack.decode(reply.payload.details)["name"]
        return False, str(name)
    finally:
        await ws.close()


def _durable_keys(data: Path) -> dict[str, int]:
    """What a restart would load: key -> millis of its winning op, from the journal file."""
    core = TopGunCore(Clock(), persistent=True)
    with Journal(data, readonly=True) as j:
        core.load(j.all_ops())
    out = {}
    for key in core.maps.live_items("users"):
        winner = core.maps.store.lww_winner("users", key)
        assert winner is not None
        out[key] = winner.ts.millis
    return out


WRITERS = 6


async def _writer(
    http: aiohttp.ClientSession,
    url: str,
    me: int,
    acked: dict[str, int],
    refused: list[str],
    disk_freed: asyncio.Event,
) -> None:
    """Batches of its own keys until the disk has been full and freed again; a refused
    batch is resent unchanged until it is acknowledged (as TopGun's client does)."""
    for round_ in range(300):  # bounded; the disk fills and is freed long before
        millis = 10_000 + round_
        ops = [put(f"{me}-{round_}-{i}", f"w{me}-k{round_}-{i}", VALUE, millis) for i in range(10)]
        message = batch(*ops, write_concern="PERSISTED")
        while True:
            freed = disk_freed.is_set()
            ok, what = await _send_persisted(http, url, message)
            if ok:
                acked.update({op.key: millis for op in ops})
                break
            refused.append(what)
            assert not freed or what != "ack"
            await asyncio.sleep(0.05)
        if disk_freed.is_set() and round_ >= 3:
            return


async def test_persisted_acks_on_a_full_disk_are_never_given_and_none_is_lost(
    tmp_path: Path,
) -> None:
    """Six writers at ``PERSISTED`` while the disk fills, stays full, and is freed; then
    ``kill -9``: every acknowledged op is in the journal the restart reads."""
    rule_off = tmp_path / "rule-off.toml"
    rule_off.write_text(RULE_OFF)
    with small_disk(tmp_path / "disk", 12) as disk:
        data = disk / "var"
        acked: dict[str, int] = {}
        refused: list[str] = []
        freed = asyncio.Event()
        async with (
            spawn_server(data, "--config", str(rule_off)) as server,
            aiohttp.ClientSession() as http,
        ):
            filler = fill(disk)
            writers = asyncio.gather(
                *(_writer(http, server.url, me, acked, refused, freed) for me in range(WRITERS))
            )
            deadline = time.monotonic() + 60
            while len(refused) < 3 * WRITERS:  # every writer has been refused a few times
                assert time.monotonic() < deadline, "the disk never filled"
                await asyncio.sleep(0.05)
            status, body = await _health(http, server.port)
            assert status == 503, body
            assert body["status"] == "degraded", body
            refused_while_full = len(refused)
            filler.unlink()  # room again: the server resumes by itself
            freed.set()
            await asyncio.wait_for(writers, 120)
            assert (await _health(http, server.port))[0] == 200
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
        durable = _durable_keys(data)
        lost = {k for k, millis in acked.items() if durable.get(k, -1) < millis}
        assert not lost, (len(acked), len(lost), sorted(lost)[:5])
        assert len(acked) >= WRITERS * 10 * 4
        assert "JournalUnavailable" in refused or any("1013" in r for r in refused), refused[:5]
        assert refused_while_full >= 3 * WRITERS


async def test_a_lazily_producer_learns_what_is_journaled_and_keeps_it_through_a_full_disk(
    tmp_path: Path,
) -> None:
    """``outbox_ack``: the epochs the server says are journaled come back after ``kill -9``;
    while the disk is full the producer is refused, never silently dropped."""
    rule_off = tmp_path / "rule-off.toml"
    rule_off.write_text(RULE_OFF)
    with small_disk(tmp_path / "disk", 8) as disk:
        data = disk / "var"
        durable_epoch = -1
        async with (
            spawn_server(data, "--config", str(rule_off)) as server,
            aiohttp.ClientSession() as http,
        ):
            ws = await http.ws_connect(f"{server.url}/lazily", max_msg_size=0)
            await ws.send_str(
                handshake("s", publish=True, features=["publish", "outbox_ack"]).decode()
            )
            reply = json.loads((await ws.receive()).data)
            assert "outbox_ack" in reply["features"]
            await ws.send_bytes(snap(0, {1: b"a"}))
            filler = None
            closed = False
            for epoch in range(1, 3000):
                if epoch == 20:
                    filler = fill(disk)
                try:
                    await ws.send_bytes(delta(epoch - 1, 1, b"x" * 1500))
                except ConnectionError:
                    closed = True
                    break
                while True:  # take the acks that arrived, without waiting for any
                    try:
                        got = await asyncio.wait_for(ws.receive(), 0.001)
                    except TimeoutError:
                        break
                    if got.type != aiohttp.WSMsgType.TEXT:
                        closed = True
                        break
                    doc = json.loads(got.data)
                    if doc.get("type") == "outbox_ack":
                        durable_epoch = max(durable_epoch, doc["through_epoch"])
                    else:
                        assert doc.get("code") == "JournalUnavailable", doc
                if closed:
                    break
            assert closed, "the producer was never refused"
            assert filler is not None
            assert durable_epoch >= 1
            server.proc.send_signal(signal.SIGKILL)  # still full: whatever waited is lost
            server.proc.wait()
            filler.unlink()
        async with spawn_server(data) as again, aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{again.url}/lazily", max_msg_size=0)
            await ws.send_str(handshake("s").decode())
            await ws.receive()
            first = msgspec.json.decode((await ws.receive()).data, type=Snapshot)
            assert first.epoch >= durable_epoch, (first.epoch, durable_epoch)


async def test_immutable_journal_files_degrade_the_server_instead_of_killing_it(
    tmp_path: Path,
) -> None:
    need_root()
    data = tmp_path / "var"
    async with spawn_server(data) as server, aiohttp.ClientSession() as http:
        message = batch(put("1", "a", 1, 5_000), write_concern="PERSISTED")
        assert (await _send_persisted(http, server.url, message))[0]
        set_immutable(journal_files(data), True)
        try:
            late = batch(put("2", "b", 2, 6_000), write_concern="PERSISTED")
            ok, what = await _send_persisted(http, server.url, late)
            if ok:  # the commit raced the chattr; the next one cannot
                late = batch(put("3", "c", 3, 7_000), write_concern="PERSISTED")
                ok, what = await _send_persisted(http, server.url, late)
            assert not ok, what
            assert server.proc.poll() is None, "the server died"
            status, body = await _health(http, server.port)
            assert status == 503, body
            assert "journal" in body, body
        finally:
            set_immutable(journal_files(data), False)
        deadline = time.monotonic() + WAIT
        while (await _health(http, server.port))[0] != 200:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert (await _send_persisted(http, server.url, late))[0]
        assert server.proc.poll() is None


def test_a_second_server_on_the_same_folder_exits_2_naming_the_folder_and_the_holder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "var"
    first = subprocess.Popen(
        [*SERVE, "--port", str(free_port()), "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None
        assert b"octosync serving" in first.stdout.readline()
        second = subprocess.run(
            [*SERVE, "--port", str(free_port()), "--data", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        said = refusal(second)
        assert str(data.resolve()) in said, said
        assert f"process {first.pid}" in said, said
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the kernel let the lock go with the process: a restart is not blocked by a stale file
    again = subprocess.Popen(
        [*SERVE, "--port", str(free_port()), "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert again.stdout is not None
        assert b"octosync serving" in again.stdout.readline()
    finally:
        again.send_signal(signal.SIGKILL)
        again.wait()


async def test_a_failed_commit_answers_an_http_sync_at_once_with_its_reason(tmp_path: Path) -> None:
    """``POST /topgun/sync`` at ``PERSISTED`` whose commit fails: 503 naming the failure, as
    soon as the commit is back (not after the answer's wait for a commit runs out)."""
    need_root()
    data = tmp_path / "var"
    async with spawn_server(data) as server, aiohttp.ClientSession() as http:
        first = batch(put("1", "a", 1, 5_000), write_concern="PERSISTED")
        assert (await _send_persisted(http, server.url, first))[0]
        set_immutable(journal_files(data), True)
        try:
            request = th.HttpSyncRequest(
                client_id="c",
                client_hlc=WireTimestamp(1, 0, "c"),
                operations=[put("2", "b", 2, 6_000, write_concern="PERSISTED")],
            )
            url = f"http://127.0.0.1:{server.port}/topgun/sync"
            async with http.post(url, data=msgspec.msgpack.encode(request)) as resp:
                status, body = resp.status, msgspec.msgpack.decode(await resp.read())
        finally:
            set_immutable(journal_files(data), False)
        assert status == 503, body
        (error,) = body["errors"]
        assert error["message"].startswith("Overloaded: the write was not committed ("), error
