"""The journal hook, a TCP token in the handshake, and the WVP snapshot request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import msgspec

from octosync.hub import SnapshotFrame
from octosync.hub.model import Frame
from octosync.hub.types import ConnId, StreamId
from octosync.server.auth import AuthConfig, issue_token
from octosync.wire import wvp
from tests.e2e.helpers import (
    TcpLazily,
    delta,
    free_port,
    handshake_struct,
    serve,
    snap,
    ws_lazily,
)
from tests.e2e.test_wvp_face import connect, recv, stream


async def test_on_accept_sees_exactly_the_accepted_frames(tmp_path: Path) -> None:
    seen: list[tuple[StreamId, ConnId, Frame[object]]] = []
    async with (
        serve(tmp_path, on_accept=lambda s, c, f: seen.append((s, c, f))) as srv,
        aiohttp.ClientSession() as http,
    ):
        prod, _ = await ws_lazily(http, srv.ws_url, "j", publish=True)
        await prod.send_bytes(snap(0, {1: b"a"}))
        await prod.send_bytes(delta(3, 1, b"gap"))
        await prod.send_bytes(delta(0, 1, b"b"))
        await asyncio.wait_for(prod.receive(), 5)  # the EpochGap error
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        assert [s for s, _, _ in seen] == ["j", "j"]
        assert isinstance(seen[0][2], SnapshotFrame)
        assert [f.epoch if isinstance(f, SnapshotFrame) else f.to_epoch for _, _, f in seen] == [
            0,
            1,
        ]


async def test_tcp_peers_carry_their_token_as_a_feature(tmp_path: Path) -> None:
    secret = "tcp-test-secret-tcp-test-secret-tcp-test"
    port = free_port()
    async with serve(
        tmp_path, tcp_port=port, insecure_dev=False, auth=AuthConfig(hs256_secret=secret)
    ):
        anon = await TcpLazily.open(port)
        anon.send(msgspec.json.encode(handshake_struct("s")))
        assert json.loads(await anon.recv())["code"] == "Unauthorized"
        assert await anon.closed()
        token = issue_token(secret, "t", {"s": ["read"]})
        hs = msgspec.structs.replace(handshake_struct("s"), features=(f"auth:{token}",))
        ok = await TcpLazily.open(port)
        ok.send(msgspec.json.encode(hs))
        assert json.loads(await ok.recv())["session_id"] == "s"
        ok.close()


async def test_full_replay_log_asks_the_wvp_producer_for_a_snapshot(tmp_path: Path) -> None:
    async with serve(tmp_path, max_replay_diffs=2) as srv, aiohttp.ClientSession() as http:
        prod = await connect(http, srv.ws_url)
        await prod.send_bytes(stream(5, wvp.WarpSnapshot(epoch=0, graph=None)))
        for e in range(3):
            await prod.send_bytes(stream(5, wvp.WarpDiff(e, e + 1, [])))
        note, _ = await recv(prod)
        assert isinstance(note, wvp.Notification)
        assert note.title == "snapshot requested"
        assert note.scope == {"Warp": 5}
