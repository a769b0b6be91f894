"""A journaling server: every frame the hub accepts lands in the journal, in order; rejected
frames never do."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from octosync.store.journal import Journal
from octosync.store.records import StreamFrame
from tests.e2e.helpers import delta, serve, snap, ws_lazily


async def test_accepted_frames_are_journalled_in_accept_order(tmp_path: Path) -> None:
    async with (
        serve(tmp_path, journal=True) as srv,
        aiohttp.ClientSession() as http,
    ):
        prod, _ = await ws_lazily(http, srv.ws_url, "board", publish=True)
        sub, _ = await ws_lazily(http, srv.ws_url, "board")
        sent = [snap(0, {1: b"a", 2: b"b"}), delta(0, 1, b"c"), delta(1, 2, b"d")]
        await prod.send_bytes(sent[0])
        await prod.send_bytes(sent[1])
        await prod.send_bytes(delta(5, 1, b"gap"))  # EpochGap: rejected, never journalled
        await asyncio.wait_for(prod.receive(), 5)
        await prod.send_bytes(sent[2])
        received = 0
        while received < 3:  # snapshot + two deltas reach the subscriber
            msg = await asyncio.wait_for(sub.receive(), 5)
            received += 1 if msg.type == aiohttp.WSMsgType.TEXT else 0
        await prod.close()
        await sub.close()
    # the server has shut down: its writer drained and closed
    with Journal(tmp_path) as journal:
        entries = list(journal.frames("board"))
    frames = [e.record for e in entries]
    assert all(isinstance(f, StreamFrame) for f in frames)
    chain = [(f.snapshot, f.base_epoch, f.epoch) for f in frames if isinstance(f, StreamFrame)]
    assert chain == [(True, 0, 0), (False, 0, 1), (False, 1, 2)]
    seqs = [e.seq for e in entries]
    assert seqs == sorted(seqs)
    # the journal holds the producer's own bytes, with their dialect: nothing was re-encoded
    assert [(f.payload, f.codec) for f in frames if isinstance(f, StreamFrame)] == [
        (data, "json") for data in sent
    ]


async def test_no_journal_unless_asked(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "quiet", publish=True)
        await prod.send_bytes(snap(0, {1: b"a"}))
        await prod.close()
    assert not (tmp_path / "journal.sqlite3").exists()
