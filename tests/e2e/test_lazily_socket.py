"""Lazily on a Unix socket (``serve --lazily-socket``): the TCP face's u32 frames on a socket
file of mode 0600, for streams and shared documents, next to WebSocket peers; the file is made
safely (a stale one replaced, a live one, a symlink or any other file refused) and removed at
stop."""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import subprocess
from pathlib import Path

import aiohttp
import pytest

from octosync.client.shared import SharedDocument
from octosync.crdt.shared import node_of
from octosync.errors import ListenError
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.wire import DIALECTS
from tests.e2e.helpers import (
    OCTOSYNC,
    TIMEOUT,
    Follower,
    TcpLazily,
    delta,
    follow_until,
    free_port,
    handshake,
    refusal,
    serve,
    snap,
    spawn_server,
    ws_lazily,
)

_JSON = DIALECTS["json"]


async def test_a_socket_producer_reaches_socket_and_websocket_subscribers(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "lazily.sock"
    async with serve(tmp_path, lazily_socket=str(sock)) as srv, aiohttp.ClientSession() as http:
        assert stat.S_ISSOCK(sock.lstat().st_mode)
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        local = await TcpLazily.open_unix(sock)
        local.send(handshake("board"))
        assert json.loads(await local.recv())["session_id"] == "board"
        ws, reply = await ws_lazily(http, srv.ws_url, "board")
        assert reply["session_id"] == "board"
        producer = await TcpLazily.open_unix(sock)
        producer.send(handshake("board", publish=True))
        await producer.recv()
        producer.send(snap(0, {1: b"a", 2: b"b"}))
        for e in range(3):
            producer.send(delta(e, 1, f"v{e}".encode()))
        seen = Follower()
        while seen.epoch != 3:
            seen.feed(await local.recv())
        assert (seen.values, seen.gaps) == ({1: b"v2", 2: b"b"}, 0)
        remote = await follow_until(ws, Follower(), 3)
        assert remote.values == {1: b"v2", 2: b"b"}
        producer.send(delta(9, 1, b"gap"))  # refused like on TCP: typed, on this connection
        assert json.loads(await producer.recv())["code"] == "EpochGap"
        for c in (local, producer):
            c.close()
        await ws.close()


async def test_a_socket_writer_shares_a_document_with_a_websocket_writer(tmp_path: Path) -> None:
    sock = tmp_path / "lazily.sock"
    async with (
        serve(tmp_path, lazily_socket=str(sock)) as srv,
        SharedDocument(srv.ws_url, "doc") as doc,
    ):
        doc.counter("clicks").add(2)
        await doc.synced(TIMEOUT)
        writer = await TcpLazily.open_unix(sock)
        writer.send(handshake("doc", peer_id=31, features=[FEATURE]))
        assert FEATURE in json.loads(await writer.recv())["features"]
        joined = json.loads(await writer.recv())
        assert joined["type"] == "crdt_sync"
        assert [op["key"] for op in joined["ops"]] == [f"clicks/pn/{doc.peer}"]
        op = CrdtOp(node_of("clicks"), WireStamp(1, 0, 31), b"[3,0]", key="clicks/pn/31")
        writer.send(_JSON.encode(CrdtSync(ops=(op,))))
        ack = json.loads(await writer.recv())
        assert ack["ops"][0]["key"] == "clicks/pn/31"
        await doc.wait_until(lambda: doc.counter("clicks").value == 5, TIMEOUT)
        writer.close()


async def test_an_oversize_frame_closes_only_that_socket_connection(tmp_path: Path) -> None:
    sock = tmp_path / "lazily.sock"
    async with serve(tmp_path, lazily_socket=str(sock), max_frame_size=1024):
        good = await TcpLazily.open_unix(sock)
        good.send(handshake("x", publish=True))
        await good.recv()
        big = await TcpLazily.open_unix(sock)
        big.writer.write(struct.pack(">I", 10_000_000))  # header only: refused unread
        assert json.loads(await big.recv())["code"] == "Oversize"
        assert await big.closed()
        good.send(snap(0, {1: b"ok"}))
        late = await TcpLazily.open_unix(sock)
        late.send(handshake("x"))
        await late.recv()
        assert json.loads(await late.recv())["epoch"] == 0
        for c in (good, late):
            c.close()


async def test_a_stale_socket_is_replaced_and_a_live_one_symlink_or_file_refused(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "lazily.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()  # the file stays and nobody listens: what a killed server leaves
    async with serve(tmp_path, lazily_socket=str(sock)):
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        inode = sock.lstat().st_ino
        with pytest.raises(ListenError, match="another process serves"):
            async with serve(tmp_path / "b", lazily_socket=str(sock)):
                pass
        assert sock.lstat().st_ino == inode  # the live server's file is untouched
        probe = await TcpLazily.open_unix(sock)
        probe.send(handshake("still-served"))
        assert json.loads(await probe.recv())["session_id"] == "still-served"
        probe.close()
    assert not sock.exists()  # removed at stop
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "link.sock"
    link.symlink_to(target)
    with pytest.raises(ListenError, match="is a symlink"):
        async with serve(tmp_path, lazily_socket=str(link)):
            pass
    assert link.is_symlink()
    assert target.read_text() == "keep"
    dangling = tmp_path / "dangling.sock"
    dangling.symlink_to(tmp_path / "nowhere.sock")  # bind must not create the file it names
    with pytest.raises(ListenError, match="is a symlink"):
        async with serve(tmp_path, lazily_socket=str(dangling)):
            pass
    assert not (tmp_path / "nowhere.sock").exists()
    with pytest.raises(ListenError, match="not a socket"):
        async with serve(tmp_path, lazily_socket=str(target)):
            pass
    assert target.read_text() == "keep"


async def test_a_second_serve_on_the_same_socket_says_so_in_one_line_and_exits_2(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "lazily.sock"
    async with spawn_server(tmp_path / "a", "--lazily-socket", str(sock)):
        second = [*OCTOSYNC, "serve", "--insecure-dev", "--port", str(free_port())]
        second += ["--data", str(tmp_path / "b"), "--lazily-socket", str(sock)]
        done = subprocess.run(second, capture_output=True, text=True, timeout=60)
        line = refusal(done)
        assert f"another process serves {sock}; choose another --lazily-socket" in line
        assert "serving" not in done.stdout
        assert stat.S_ISSOCK(os.lstat(sock).st_mode)  # the first server's file is still there
