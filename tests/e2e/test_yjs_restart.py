"""``kill -9`` while a Hocuspocus client types: every update the server confirmed
(``SyncStatus``) is in the document after a restart, and a journal that cannot commit
confirms nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
from pycrdt import Doc, Text

from octosync.yjs import messages as m
from tests.e2e.helpers import spawn_server
from tests.e2e.yjs_client import next_body, open_hocuspocus, read_document
from tests.store.faults import journal_files, need_root, set_immutable

NOTES = m.address_prefix("notes")
SENT = 400


async def type_until_killed(port: int, proc_pid: int) -> int:
    """Pipeline ``SENT`` edits, kill the server once 50 are confirmed; returns how many were
    confirmed (in order: each confirmation follows its commit, commits keep submit order)."""
    doc: Doc[Any] = Doc()
    text = doc.get("text", type=Text)
    confirmed = 0
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{port}/yjs")
        assert await open_hocuspocus(ws, "notes") == m.authenticated(False)
        for i in range(SENT):
            before = doc.get_state()
            text.insert(len(text), f"<{i}>")
            await ws.send_bytes(NOTES + m.sync_update(doc.get_update(before)))
        with contextlib.suppress(AssertionError, TimeoutError, aiohttp.ClientError):
            while True:
                body = await next_body(ws, NOTES)
                if body == m.sync_status(True):
                    confirmed += 1
                    if confirmed == 50:
                        os.kill(proc_pid, signal.SIGKILL)
    return confirmed


async def test_every_confirmed_update_survives_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "var"
    async with spawn_server(data) as server:
        confirmed = await type_until_killed(server.port, server.proc.pid)
        server.proc.wait()
    assert confirmed >= 50
    async with spawn_server(data) as again, aiohttp.ClientSession() as http:
        text = str(
            (await read_document(http, f"ws://127.0.0.1:{again.port}", "notes")).get(
                "text", type=Text
            )
        )
    for i in range(confirmed):
        assert f"<{i}>" in text, (i, confirmed)


async def test_a_journal_that_cannot_commit_confirms_nothing(tmp_path: Path) -> None:
    need_root()
    data = tmp_path / "var"
    async with spawn_server(data) as server, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{server.port}/yjs")
        await open_hocuspocus(ws, "notes")
        doc: Doc[Any] = Doc()
        text = doc.get("text", type=Text)
        text += "kept"
        await ws.send_bytes(NOTES + m.sync_update(doc.get_update()))
        assert await next_body(ws, NOTES) == m.sync_status(True)
        set_immutable(journal_files(data), True)
        try:
            answers = []
            for word in ("lost", "refused"):
                before = doc.get_state()
                text += word
                await ws.send_bytes(NOTES + m.sync_update(doc.get_update(before)))
                msg = await ws.receive(timeout=10)
                answers.append(msg.data if msg.type == aiohttp.WSMsgType.BINARY else msg.type)
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
            raced = answers[0] == NOTES + m.sync_status(True)  # committed before the chattr
            assert NOTES + m.sync_status(True) not in answers[1:], answers
            assert ws.close_code == 1013, (answers, ws.close_code)  # JournalUnavailable
            got = str(
                (await read_document(http, f"ws://127.0.0.1:{server.port}", "notes")).get(
                    "text", type=Text
                )
            )
            assert got == ("keptlost" if raced else "kept")
        finally:
            set_immutable(journal_files(data), False)
        await asyncio.sleep(0)
        assert server.proc.poll() is None
