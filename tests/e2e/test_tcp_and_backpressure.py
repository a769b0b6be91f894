"""The lazily dialect over plain TCP, and a stalled subscriber reset while others keep going."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import aiohttp

from tests.e2e.helpers import (
    Follower,
    TcpLazily,
    delta,
    follow_until,
    free_port,
    handshake,
    serve,
    snap,
    ws_lazily,
)


async def test_tcp_two_subscribers_one_producer_and_authority(tmp_path: Path) -> None:
    port = free_port()
    async with serve(tmp_path, tcp_port=port):
        subs = [await TcpLazily.open(port) for _ in range(2)]
        for s in subs:
            s.send(handshake("t"))
            assert json.loads(await s.recv())["session_id"] == "t"
        prod = await TcpLazily.open(port)
        prod.send(handshake("t", publish=True))
        await prod.recv()
        prod.send(snap(0, {1: b"a"}))
        for e in range(5):
            prod.send(delta(e, 1, str(e).encode()))
        for s in subs:
            f = Follower()
            while f.epoch != 5:
                f.feed(await s.recv())
            assert f.values == {1: b"4"}
            assert f.gaps == 0
        thief = await TcpLazily.open(port)
        thief.send(handshake("t", publish=True))
        assert json.loads(await thief.recv())["code"] == "ForbiddenPublish"
        prod.send(delta(7, 1, b"gap"))
        assert json.loads(await prod.recv())["code"] == "EpochGap"
        for c in [*subs, prod, thief]:
            c.close()


async def test_tcp_garbage_and_oversize_close_only_that_connection(tmp_path: Path) -> None:
    port = free_port()
    async with serve(tmp_path, tcp_port=port, max_frame_size=1024):
        good = await TcpLazily.open(port)
        good.send(handshake("x", publish=True))
        await good.recv()
        garbage = await TcpLazily.open(port)
        garbage.send(handshake("x"))
        await garbage.recv()
        garbage.send(b"\xff\xfe not json")
        err = json.loads(await garbage.recv())
        assert err["code"] == "DecodeError"
        assert await garbage.closed()
        big = await TcpLazily.open(port)
        big.writer.write(struct.pack(">I", 10_000_000))  # header only: refused unread
        err = json.loads(await big.recv())
        assert err["code"] == "Oversize"
        assert await big.closed()
        good.send(snap(0, {1: b"ok"}))
        late = await TcpLazily.open(port)
        late.send(handshake("x"))
        await late.recv()
        assert json.loads(await late.recv())["epoch"] == 0


async def test_stalled_subscriber_is_reset_while_others_keep_receiving(tmp_path: Path) -> None:
    port = free_port()
    async with (
        serve(
            tmp_path,
            tcp_port=port,
            outbox_max_frames=32,
            outbox_max_bytes=256 * 1024,
            socket_high_water=32 * 1024,
        ) as srv,
        aiohttp.ClientSession() as http,
    ):
        stalled = await TcpLazily.open(port, rcvbuf=4096, limit=32 * 1024)
        stalled.send(handshake("big"))
        await stalled.recv()
        fast = [await ws_lazily(http, srv.ws_url, "big") for _ in range(2)]
        prod, _ = await ws_lazily(http, srv.ws_url, "big", publish=True)
        await prod.send_bytes(snap(0, {1: b""}))
        followers = [Follower() for _ in fast]
        value = b"v" * 8192
        n = 1200
        readers = [
            asyncio.create_task(follow_until(ws, f, n))
            for (ws, _), f in zip(fast, followers, strict=True)
        ]
        for e in range(n):
            await prod.send_bytes(delta(e, 1, value + str(e).encode()))
            if e % 8 == 7:  # the fast readers keep up; the stalled one never reads
                while min(f.epoch or 0 for f in followers) < e + 1:
                    await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.gather(*readers), 30)
        for f in followers:
            assert f.gaps == 0
            assert f.deltas == n  # the fast ones saw every delta, never a reset
            assert f.snapshots == 1
        assert srv.runtime.hub.stats.resets >= 1
        slow = Follower()
        while slow.epoch != n:
            slow.feed(await stalled.recv())
        assert slow.gaps == 0
        assert slow.snapshots >= 2  # the first one, then the reset
        assert slow.deltas < n
        assert slow.values == followers[0].values
        stalled.close()
