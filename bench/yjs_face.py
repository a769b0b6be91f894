"""The ``/yjs`` face against Hocuspocus's server and y-websocket's, same run, same Node clients.

Each protocol's clients against octosync and against that protocol's own server: Hocuspocus's
``HocuspocusProvider`` against ``/yjs`` and against ``@hocuspocus/server`` with its SQLite
extension (both persist); y-websocket's ``WebsocketProvider`` against ``/yjs`` and against
y-websocket@1's ``bin/server.js`` (in memory: it persists nothing). npm packages pinned in
``bench/yjs_servers/package.json``, installed into ``~/.cache/octosync/yjs-bench`` on first use.

One Node process runs every client of a run: ``--docs`` writers (default 50), one per document,
and ``--readers`` readers in all (default 1,000), spread over the documents. A writer appends
``<seq>;`` to its document's ``Y.Text`` every ``--every`` ms, or unpaced (``--every 0``: as fast
as its pieces reach every reader, 4 in flight), for ``--seconds``. Reported per run: updates
delivered to readers per second, p50 and p99 from an update to its *last* reader, the server's
CPU seconds per thousand deliveries, and durability: after the run (Hocuspocus writers wait
until the server confirmed every change) the server is SIGKILLed and what it persisted is
read back (octosync: started again on its data directory; Hocuspocus: its SQLite file), and
every confirmed piece looked for. The machine's cores are shared by the clients and the
servers (and, on a shared machine, whatever else runs: the load average is printed).

    python bench/yjs_face.py              # 50 writers, 1,000 readers: paced (100 ms), unpaced
    python bench/yjs_face.py --quick      # 4 documents, 16 readers, 2 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from pycrdt import Doc, Text

from octosync.yjs import messages as m

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ROOT / "bench" / "yjs_servers"
CACHE = Path.home() / ".cache" / "octosync" / "yjs-bench"
CONFIG = """
[server]
max_connections_per_address = 8192
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def install() -> Path:
    """The cache folder with the pinned packages (npm install when the pins changed).
    better-sqlite3 (Hocuspocus's SQLite extension) builds against the local Node headers when
    no prebuilt binary can be fetched. The stamp is written only once an install finished, so
    an install cut short (a killed run) is done again, not taken for complete."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not on PATH: the bench needs Node")
    CACHE.mkdir(parents=True, exist_ok=True)
    pins = (SERVERS / "package.json").read_text()
    stamp = CACHE / ".installed"
    if not stamp.exists() or stamp.read_text() != pins:
        stamp.unlink(missing_ok=True)
        (CACHE / "package.json").write_text(pins)
        env = dict(os.environ)
        if Path("/usr/include/node/node.h").exists():
            env.setdefault("npm_config_nodedir", "/usr")
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund"],
            cwd=CACHE,
            check=True,
            capture_output=True,
            timeout=900,
            env=env,
        )
        stamp.write_text(pins)
    for script in ("clients.mjs", "hocuspocus.mjs"):
        shutil.copy(SERVERS / script, CACHE / script)
    return CACHE


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):  # bounded: 30 s
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    sys.exit("the server did not come up")


@dataclass
class Server:
    name: str
    kind: str
    """The provider its clients use: ``hocuspocus`` or ``y-websocket``."""
    url: str
    proc: subprocess.Popen[bytes]
    persisted: Callable[[list[str]], dict[str, str]] | None
    """After the SIGKILL: each document's text as persisted (None: it persists nothing)."""


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def octosync_cmd(port: int, data: Path, config: Path) -> list[str]:
    return [
        sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev",
        "--port", str(port), "--data", str(data), "--config", str(config),
    ]  # fmt: skip


async def read_texts(port: int, names: list[str]) -> dict[str, str]:
    """Each document's Y.Text ``t`` as a y-websocket peer with nothing gets it (one step 2)."""
    out: dict[str, str] = {}
    async with aiohttp.ClientSession() as http:
        for name in names:
            async with http.ws_connect(f"ws://127.0.0.1:{port}/yjs/{name}") as ws:
                await ws.send_bytes(m.sync_step1(b"\x00"))
                while True:
                    msg = await ws.receive(timeout=30)
                    message = m.decode_y_websocket(msg.data)
                    if isinstance(message, m.SyncStep2):
                        doc: Doc[Any] = Doc()
                        doc.apply_update(message.update)
                        out[name] = str(doc.get("t", type=Text))
                        break
    return out


@contextmanager
def octosync(kind: str, root: Path) -> Iterator[Server]:
    port = free_port()
    data = root / "octosync"
    config = root / "octosync.toml"
    config.write_text(CONFIG)
    proc = subprocess.Popen(
        octosync_cmd(port, data, config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def persisted(names: list[str]) -> dict[str, str]:
        again_port = free_port()
        again = subprocess.Popen(
            octosync_cmd(again_port, data, config),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port(again_port, again)
            return asyncio.run(read_texts(again_port, names))
        finally:
            stop(again)

    try:
        wait_port(port, proc)
        yield Server("octosync", kind, f"ws://127.0.0.1:{port}/yjs", proc, persisted)
    finally:
        stop(proc)


@contextmanager
def hocuspocus(folder: Path, root: Path) -> Iterator[Server]:
    port = free_port()
    database = root / "hocuspocus.sqlite"
    proc = subprocess.Popen(
        ["node", str(folder / "hocuspocus.mjs"), str(port), str(database)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def persisted(names: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        with sqlite3.connect(database) as db:
            for name, data in db.execute("SELECT name, data FROM documents"):
                if name in names:
                    doc: Doc[Any] = Doc()
                    doc.apply_update(bytes(data))
                    out[name] = str(doc.get("t", type=Text))
        return out

    try:
        wait_port(port, proc)
        yield Server("hocuspocus", "hocuspocus", f"ws://127.0.0.1:{port}", proc, persisted)
    finally:
        stop(proc)


@contextmanager
def y_websocket(folder: Path, root: Path) -> Iterator[Server]:
    port = free_port()
    server = folder / "node_modules" / "y-websocket" / "bin" / "server.js"
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
    proc = subprocess.Popen(
        ["node", str(server)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(port, proc)
        yield Server("y-websocket", "y-websocket", f"ws://127.0.0.1:{port}", proc, None)
    finally:
        stop(proc)


def run_clients(
    folder: Path, server: Server, args: argparse.Namespace, every: int, tag: str
) -> dict[str, Any]:
    before = cpu_seconds(server.proc.pid)
    counts = [str(v) for v in (args.docs, args.readers, every, args.seconds)]
    done = subprocess.run(
        ["node", "clients.mjs", server.kind, server.url, *counts, tag],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300 + args.seconds * 4,
    )
    if done.returncode != 0:
        sys.exit(f"the clients failed against {server.name}: {done.stderr[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = cpu_seconds(server.proc.pid) - before
    stop(server.proc)  # SIGKILL: what it confirmed must be on its disk now
    result["lost"] = None
    if server.persisted is not None:
        written: dict[str, int] = result["written"]
        texts = server.persisted(sorted(written))
        lost = 0
        for name, count in written.items():
            have = set(texts.get(name, "").split(";"))
            lost += sum(1 for seq in range(count) if str(seq) not in have)
        result["lost"] = lost
    return result


def row(label: str, r: dict[str, Any]) -> str:
    rate = r["delivered"] / r["elapsed"]
    cpu = 1000 * r["cpu"] / max(r["delivered"], 1)
    if r["lost"] is None:
        durable = "not persisted"
    else:
        durable = f"{r['lost']} of {r['sent']} lost after SIGKILL"
        if r["unconfirmed"]:
            durable += f" ({r['unconfirmed']} writers unconfirmed)"
    return (
        f"{label:<26} {rate:>9,.0f} /s  p50 {r['p50']:>5} ms  p99 {r['p99']:>5} ms  "
        f"server CPU {cpu:.3f} s/1,000  clients CPU {r['clientCpu']:.1f} s  "
        f"{r['complete']}/{r['sent']} at every reader  {durable}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=50)
    parser.add_argument("--readers", type=int, default=1000, help="readers in all")
    parser.add_argument("--every", type=int, default=100, help="ms between a writer's edits")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--paces", default="paced,unpaced", help="paced, unpaced or both")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.readers, args.seconds = 4, 16, 2.0
    folder = install()
    print(
        f"{args.docs} writers into {args.docs} documents, {args.readers} readers in all, "
        f"{args.seconds:g} s per run; one Node process runs each run's clients"
    )
    for pace in args.paces.split(","):
        every = args.every if pace == "paced" else 0
        offered = int(args.docs * args.seconds * 1000 / every) if every else 0
        what = (
            f"an edit per writer every {every} ms ({offered:,} updates offered)"
            if every
            else "unpaced (4 updates per writer in flight)"
        )
        load = os.getloadavg()
        results: dict[str, dict[str, Any]] = {}
        runs: list[tuple[str, Callable[[Path], Any]]] = [
            ("octosync (hocuspocus)", lambda root: octosync("hocuspocus", root)),
            ("hocuspocus + sqlite", lambda root: hocuspocus(folder, root)),
            ("octosync (y-websocket)", lambda root: octosync("y-websocket", root)),
            ("y-websocket", lambda root: y_websocket(folder, root)),
        ]
        for i, (label, start) in enumerate(runs):
            with tempfile.TemporaryDirectory(prefix="yjs-bench-") as tmp, start(Path(tmp)) as srv:
                results[label] = run_clients(folder, srv, args, every, f"{pace}{i}{os.getpid()}")
        after = os.getloadavg()
        print(f"\n{what}; load average {load[0]:.2f} before, {after[0]:.2f} after")
        for label, result in results.items():
            print(row(label, result))

        def rate(r: dict[str, Any]) -> float:
            return float(r["delivered"]) / float(r["elapsed"])

        for ours, theirs in (
            ("octosync (hocuspocus)", "hocuspocus + sqlite"),
            ("octosync (y-websocket)", "y-websocket"),
        ):
            a, b = results[ours], results[theirs]
            cpu_a = a["cpu"] / max(a["delivered"], 1)
            cpu_b = b["cpu"] / max(b["delivered"], 1)
            print(
                f"{ours} / {theirs}: deliveries per second {rate(a) / rate(b):.2f}, "
                f"server CPU per delivery {cpu_a / max(cpu_b, 1e-12):.2f}"
            )


if __name__ == "__main__":
    main()
