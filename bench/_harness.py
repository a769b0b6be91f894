"""What the benchmarks share: a server in its own process, a canary, Node peers from npm.

The server runs ``octosync serve`` with auth on (a token granting everything is ``TOKEN``) and
its journal on; the canary is a producer publishing a delta every 2 ms to a subscriber of
another stream, recording the longest gap between deltas and any epoch gap.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from octosync.ipc.messages import Delta, NodeSnapshot, Snapshot
from octosync.server.auth import issue_token

SECRET = "bench-hostile-secret-bench-hostile-secret"
TOKEN = issue_token(
    SECRET,
    "bench",
    {"*": ["read", "publish", "write"], "$global": ["publish"]},
    rooms={"*": ["join"]},
)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux ``/proc``): a process's
    work, which a busy machine's scheduling does not inflate as it does latencies."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    def __init__(self, data: Path, *, tcp: bool = False, **server: Any) -> None:
        """``server``: ``[server]`` keys of the config file; ``tcp``: also lazily over TCP."""
        self.port = free_port()
        self.tcp_port = free_port() if tcp else None
        if self.tcp_port is not None:
            server["tcp_port"] = self.tcp_port
        lines = ["[server]"] + [f"{k} = {json.dumps(v)}" for k, v in server.items()]
        lines += ["[auth]", f'hs256_secret = "{SECRET}"']
        config = data / "octosync.toml"
        config.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "octosync.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(self.port),
                "--data",
                str(data / "var"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.http = f"http://127.0.0.1:{self.port}"
        self.ws = f"ws://127.0.0.1:{self.port}"

    async def ready(self, http: aiohttp.ClientSession) -> None:
        for _ in range(400):
            try:
                async with http.get(f"{self.http}/healthz"):
                    return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.025)
        raise RuntimeError("server did not start")

    async def metrics(self, http: aiohttp.ClientSession) -> dict[str, float]:
        async with http.get(f"{self.http}/metrics") as resp:
            text = await resp.text()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read().decode() if self.proc.stderr else ""


def lazily_handshake(stream: str, publish: bool, *extra_features: str) -> bytes:
    return json.dumps(
        {
            "protocol_id": "lazily-ipc",
            "protocol_major_version": 1,
            "codec": "json",
            "max_frame_size": 1 << 20,
            "fragmentation_supported": False,
            "ordered_reliable": True,
            "peer_id": 1,
            "session_id": stream,
            "features": (["publish"] if publish else []) + list(extra_features),
        }
    ).encode()


async def lazily(http: aiohttp.ClientSession, srv: Server, stream: str, publish: bool) -> Any:
    ws = await http.ws_connect(f"{srv.ws}/lazily", headers=AUTH, max_msg_size=0)
    await ws.send_bytes(lazily_handshake(stream, publish))
    await ws.receive()
    return ws


@dataclass
class Canary:
    gaps: int = 0
    received: int = 0
    longest: float = 0.0
    last: float | None = None

    def reset_window(self) -> None:
        self.longest = 0.0
        self.last = None


async def run_canary(
    http: aiohttp.ClientSession, srv: Server, canary: Canary, stop: asyncio.Event
) -> None:
    prod = await lazily(http, srv, "canary", True)
    snap = Snapshot(epoch=0, nodes=(NodeSnapshot(1, "bytes", "resolved", b"0"),))
    await prod.send_bytes(msgspec.json.encode(snap))
    sub = await lazily(http, srv, "canary", False)
    expected = 0

    async def watch() -> None:
        nonlocal expected
        async for msg in sub:
            doc = json.loads(msg.data)
            if doc.get("type") != "delta":
                continue
            now = time.monotonic()
            if canary.last is not None:
                canary.longest = max(canary.longest, now - canary.last)
            canary.last = now
            if doc["base_epoch"] != expected:
                canary.gaps += 1
            expected = doc["epoch"]
            canary.received += 1

    watcher = asyncio.create_task(watch())
    epoch = 0
    while not stop.is_set():
        delta = Delta(epoch, epoch + 1, ())
        await prod.send_bytes(msgspec.json.encode(delta))
        epoch += 1
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.2)
    watcher.cancel()
    await prod.close()
    await sub.close()


def stalls(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """Event-loop stalls per bound between two ``/metrics`` readings."""
    keys = [k for k in after if k.startswith("octosync_loop_stalls_total")]
    return {k.split('"')[1]: int(after[k] - before.get(k, 0)) for k in keys}


def worst(counts: dict[str, int]) -> str:
    over = [b for b, n in counts.items() if n]
    return f">{max(over, key=lambda b: float(b[:-2]))}" if over else "<5ms"


NODE_CACHE = Path.home() / ".cache" / "octosync"
"""Node peers are installed here by npm on first use (outside the repository)."""


class NodeUnavailable(Exception):
    """Why a Node peer cannot run here, in one line (the benchmark skips it and says so)."""


def node_folder(name: str, packages: tuple[str, ...], files: dict[str, str]) -> Path:
    """``NODE_CACHE/name`` with ``packages`` installed by npm (on first use) and ``files``
    written; ``NodeUnavailable`` when node or npm is absent or the install fails."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise NodeUnavailable(f"{tool} is not on PATH")
    folder = NODE_CACHE / name
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "package.json"
    if not package.exists():
        package.write_text(json.dumps({"name": f"octosync-bench-{name}", "private": True}) + "\n")
    names = [p.rsplit("@", 1)[0] if p.rfind("@") > 0 else p for p in packages]
    if not all((folder / "node_modules" / n / "package.json").exists() for n in names):
        done = subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", *packages],
            cwd=folder,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise NodeUnavailable(f"npm install {' '.join(packages)} failed: {reason}")
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder
