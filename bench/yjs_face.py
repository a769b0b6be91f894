"""The ``/yjs`` face against y-websocket's own server, same run, same Node clients.

One Node process runs the clients for both servers: ``--docs`` documents (default 10), each
with one writer and ``--readers`` readers (default 10), all y-websocket's ``WebsocketProvider``
(npm ``y-websocket@1`` with ``yjs`` and ``ws``, the versions pinned in
``tests/e2e/yjs_peers/package.json``, installed into ``~/.cache/octosync/yjs-bench`` on first
use). Each writer appends ``<send time>;`` to its document's ``Y.Text`` every ``--every`` ms
for ``--seconds``; each reader records, for every piece it sees, the time from the writer's
insert to its own observation. Reported per server: updates delivered to readers per second,
p50 and p99 of that latency, and the server process's CPU seconds per thousand deliveries
(the machine's cores are shared by the clients and the server, so CPU is the steadier
figure).

The servers do not promise the same thing: octosync journals each update (its commit, one
fsync per group) before it applies or fans it out; y-websocket's ``bin/server.js`` keeps its
documents in memory (no ``YPERSISTENCE``), so an update it relayed is lost on a crash. Usage::

    python bench/yjs_face.py             # 10 documents x (1 writer + 10 readers), 5 s each
    python bench/yjs_face.py --quick     # 4 x (1 + 4), 2 s each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "tests" / "e2e" / "yjs_peers" / "package.json"
CACHE = Path.home() / ".cache" / "octosync" / "yjs-bench"
SERVE = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]

CLIENTS = r"""
import * as Y from "yjs";
import WebSocket from "ws";
import { WebsocketProvider } from "y-websocket";

const args = process.argv.slice(2);
const base = args[0];
const [docs, readers, every, seconds] = args.slice(1).map(Number);
const latencies = [];
let delivered = 0;
let recording = false;
const providers = [];

function open(name) {
  const doc = new Y.Doc();
  const options = { WebSocketPolyfill: WebSocket, disableBc: true };
  const provider = new WebsocketProvider(base, name, doc, options);
  providers.push(provider);
  return new Promise((resolve) => {
    const check = () => (provider.synced ? resolve(doc) : setTimeout(check, 5));
    check();
  });
}

const writers = [];
for (let d = 0; d < docs; d++) {
  const name = `bench-${d}-${Date.now()}`;
  writers.push(await open(name));
  for (let r = 0; r < readers; r++) {
    const doc = await open(name);
    doc.getText("t").observe((event) => {
      if (!recording) return;
      const now = Date.now();
      for (const op of event.delta) {
        if (typeof op.insert !== "string") continue;
        for (const piece of op.insert.split(";")) {
          if (!piece) continue;
          delivered += 1;
          latencies.push(now - Number(piece));
        }
      }
    });
  }
}
recording = true;
const start = Date.now();
const timer = setInterval(() => {
  for (const doc of writers) {
    const text = doc.getText("t");
    text.insert(text.length, `${Date.now()};`);
  }
}, every);
await new Promise((r) => setTimeout(r, seconds * 1000));
clearInterval(timer);
await new Promise((r) => setTimeout(r, 500)); // what is in flight arrives
recording = false;
const elapsed = (Date.now() - start) / 1000;
latencies.sort((a, b) => a - b);
const n = latencies.length;
const at = (q) => latencies[Math.min(n - 1, Math.floor(q * n))] ?? NaN;
console.log(JSON.stringify({ delivered, elapsed, p50: at(0.5), p99: at(0.99) }));
for (const p of providers) p.destroy();
process.exit(0);
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def install() -> Path:
    """The cache folder with the pinned packages (npm install when the pins changed)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not on PATH: the bench needs Node")
    CACHE.mkdir(parents=True, exist_ok=True)
    pins = PINS.read_text()
    if not (CACHE / "node_modules").is_dir() or (CACHE / "package.json").read_text() != pins:
        (CACHE / "package.json").write_text(pins)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=CACHE,
            check=True,
            capture_output=True,
            timeout=600,
        )
    (CACHE / "clients.mjs").write_text(CLIENTS)
    return CACHE


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(400):  # bounded: 20 s
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    sys.exit("the server did not come up")


def run_clients(folder: Path, base: str, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    before = cpu_seconds(pid)
    counts = [str(v) for v in (args.docs, args.readers, args.every, args.seconds)]
    done = subprocess.run(
        ["node", "clients.mjs", base, *counts],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120 + args.seconds * 4,
    )
    if done.returncode != 0:
        sys.exit(f"the clients failed: {done.stderr[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu"] = cpu_seconds(pid) - before
    return result


def octosync(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="yjs-bench-") as data:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "octosync.cli",
                "serve",
                "--insecure-dev",
                "--port",
                str(port),
                "--data",
                data,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port(port, proc)
            return run_clients(folder, f"ws://127.0.0.1:{port}/yjs", args, proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def y_websocket(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    server = folder / "node_modules" / "y-websocket" / "bin" / "server.js"
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
    proc = subprocess.Popen(
        ["node", str(server)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(port, proc)
        return run_clients(folder, f"ws://127.0.0.1:{port}", args, proc.pid)
    finally:
        proc.kill()
        proc.wait()


def row(name: str, r: dict[str, Any]) -> str:
    rate = r["delivered"] / r["elapsed"]
    cpu = 1000 * r["cpu"] / max(r["delivered"], 1)
    return (
        f"{name:<12} {rate:>10,.0f} /s  p50 {r['p50']:>5} ms  p99 {r['p99']:>5} ms  "
        f"server CPU {cpu:.3f} s per 1,000 deliveries"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--every", type=int, default=20, help="ms between a writer's edits")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.readers, args.seconds = 4, 4, 2.0
    folder = install()
    load = os.getloadavg()
    ours = octosync(folder, args)
    theirs = y_websocket(folder, args)
    after = os.getloadavg()
    print(
        f"{args.docs} documents x (1 writer + {args.readers} readers), an edit per writer "
        f"every {args.every} ms for {args.seconds:g} s; load average {load[0]:.2f} before, "
        f"{after[0]:.2f} after"
    )
    print(row("octosync", ours) + "  (journaled before fan-out)")
    print(row("y-websocket", theirs) + "  (in memory, not persisted)")
    ratio = (ours["delivered"] / ours["elapsed"]) / (theirs["delivered"] / theirs["elapsed"])
    print(f"octosync / y-websocket deliveries per second: {ratio:.2f}")


if __name__ == "__main__":
    main()
