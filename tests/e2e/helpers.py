"""Loopback servers and small raw clients for the end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl as ssl_module
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from octosync.hub.types import AcceptHook
from octosync.ipc.messages import CellSet, Delta, Handshake, NodeSnapshot, Snapshot
from octosync.server.app import RUNTIME, ServerConfig, build_app
from octosync.server.face_names import FaceName
from octosync.server.run import start
from octosync.server.runtime import Runtime

TIMEOUT = 5.0


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a command refused with (exit status 2), as every refusal at start is."""
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive ports free on loopback now (``cluster up`` gives node
    ``i`` the port ``--port`` + ``i``, so one free port is not enough)."""
    for _ in range(100):
        first = free_port()
        if first + n > 65536:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + n):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return first
    raise RuntimeError(f"no {n} consecutive free ports on loopback")


@dataclass
class Running:
    url: str
    ws_url: str
    tcp_port: int | None
    runtime: Runtime
    runner: web.AppRunner
    dataspace_port: int | None = None


@contextlib.asynccontextmanager
async def serve(
    tmp_path: Path, *, on_accept: AcceptHook | None = None, **overrides: Any
) -> AsyncIterator[Running]:
    base = ServerConfig(port=0, data_dir=tmp_path, insecure_dev=True)
    config = replace(base, **overrides)
    app = build_app(config, on_accept=on_accept)
    started = await start(app, config)
    port = started.port
    try:
        yield Running(
            f"http://127.0.0.1:{port}",
            f"ws://127.0.0.1:{port}",
            started.tcp_ports.get(FaceName.TCP),
            app[RUNTIME],
            started.runner,
            started.tcp_ports.get(FaceName.DATASPACE),
        )
    finally:
        await started.stop()


def handshake_struct(session: str, *, publish: bool = False, codec: str = "json") -> Handshake:
    return Handshake(
        protocol_id="lazily-ipc",
        protocol_major_version=1,
        codec=codec,
        max_frame_size=1 << 20,
        fragmentation_supported=False,
        ordered_reliable=True,
        peer_id=7,
        session_id=session,
        features=("publish",) if publish else (),
    )


def handshake(session: str, *, publish: bool = False, **overrides: Any) -> bytes:
    raw = msgspec.to_builtins(handshake_struct(session, publish=publish))
    raw.update(overrides)
    return json.dumps(raw).encode()


def snap(epoch: int, values: dict[int, bytes]) -> bytes:
    return msgspec.json.encode(
        Snapshot(
            epoch=epoch,
            nodes=tuple(NodeSnapshot(k, "bytes", "resolved", v) for k, v in sorted(values.items())),
            roots=tuple(sorted(values)),
        )
    )


def delta(base: int, sid: int, value: bytes) -> bytes:
    return msgspec.json.encode(Delta(base, base + 1, (CellSet(sid, value),)))


_ipc = msgspec.json.Decoder(Snapshot | Delta)


class Follower:
    """What a subscriber saw, applied like a mirror: values, epoch, and any gap."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.values: dict[int, bytes] = {}
        self.snapshots = 0
        self.deltas = 0
        self.gaps = 0
        self.errors: list[dict[str, Any]] = []

    def feed(self, raw: bytes | str) -> None:
        doc = json.loads(raw)
        if doc.get("type") == "error":
            self.errors.append(doc)
            return
        msg = _ipc.decode(raw)
        if isinstance(msg, Snapshot):
            self.snapshots += 1
            self.epoch = msg.epoch
            self.values = {n.slot_id: n.payload for n in msg.nodes if isinstance(n.payload, bytes)}
            return
        self.deltas += 1
        if msg.base_epoch != self.epoch:
            self.gaps += 1
            return
        for op in msg.ops:
            if isinstance(op, CellSet) and isinstance(op.payload, bytes):
                self.values[op.slot_id] = op.payload
        self.epoch = msg.epoch


async def ws_lazily(
    http: aiohttp.ClientSession,
    url: str,
    session: str,
    *,
    publish: bool = False,
    token: str | None = None,
    **connect: Any,
) -> tuple[aiohttp.ClientWebSocketResponse, dict[str, Any]]:
    """``connect``: more ``ws_connect`` options (``autoping=False`` for a peer that ignores
    pings)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    ws = await http.ws_connect(f"{url}/lazily", headers=headers, max_msg_size=0, **connect)
    await ws.send_str(handshake(session, publish=publish).decode())
    reply = json.loads(await asyncio.wait_for(ws.receive_str(), TIMEOUT))
    return ws, reply


async def recv_json(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


async def follow_until(
    ws: aiohttp.ClientWebSocketResponse, follower: Follower, epoch: int
) -> Follower:
    while follower.epoch != epoch:
        msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        follower.feed(msg.data)
    return follower


class TcpLazily:
    """The lazily dialect over TCP (plain, or TLS given ``ssl``) with u32 length-prefixed
    frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(
        cls,
        port: int,
        *,
        rcvbuf: int | None = None,
        limit: int = 1 << 24,
        ssl: ssl_module.SSLContext | None = None,
    ) -> TcpLazily:
        sock = socket.socket()
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(
            sock=sock, limit=limit, ssl=ssl, server_hostname="127.0.0.1" if ssl else None
        )
        return cls(reader, writer)

    @classmethod
    async def open_unix(cls, path: Path, *, limit: int = 1 << 24) -> TcpLazily:
        """The same frames on a Unix socket (``serve --lazily-socket``)."""
        reader, writer = await asyncio.open_unix_connection(str(path), limit=limit)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(struct.pack(">I", len(data)) + data)

    async def recv(self) -> bytes:
        head = await asyncio.wait_for(self.reader.readexactly(4), TIMEOUT)
        return await asyncio.wait_for(
            self.reader.readexactly(struct.unpack(">I", head)[0]), TIMEOUT
        )

    async def closed(self) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(1), TIMEOUT)
        except ConnectionError:
            return True
        return data == b""

    def close(self) -> None:
        self.writer.close()


@dataclass
class Spawned:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


OCTOSYNC = (sys.executable, "-m", "octosync.cli")
"""The command line, run by this interpreter (so the worktree's code is what runs)."""


@contextlib.contextmanager
def running(
    *args: str,
    command: Sequence[str] = OCTOSYNC,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A long-running ``octosync ARGS`` child (``serve``, ``publish-demo``...), yielded with the
    first line it printed (its "serving" or "publishing" line) and stopped (SIGTERM) after."""
    proc = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.asynccontextmanager
async def spawn_server(tmp_path: Path, *args: str) -> AsyncIterator[Spawned]:
    """``octosync serve --insecure-dev`` in a child process, ready when it prints so."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
    command += ["--port", str(port), "--data", str(tmp_path), *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # Ready when it says so: "octosync serving" is printed only once every port is bound
        # (polling /healthz for a fixed while failed on a loaded machine).
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 120)
        assert b"octosync serving" in line, (line, proc.poll())
        yield Spawned(proc, port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def chain_record(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    """The next ``/chain/NAME`` record of type ``kind`` (others skipped), in a bounded wait."""
    while True:
        msg = await asyncio.wait_for(ws.receive(), 10)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        record: dict[str, Any] = json.loads(msg.data)
        if record["Type"] == kind:
            return record
