"""``octosync cluster up | down | status``: a local cluster for trying it, and its state.

``up`` starts ``nats-server`` (JetStream) from the virtual environment and N ``octosync serve
--cluster`` processes on loopback, each in its own session with its log in the data
directory, writes ``cluster.json`` there and returns; ``down`` stops what that file lists.
``status`` listens to the nodes' heartbeats and reads the ownership entries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from octosync.errors import ConfigError, OctosyncError
from octosync.links import nats_server

STATE_FILE = "cluster.json"
DEFAULT_DATA = "./var/cluster"
DEFAULT_URL = "nats://127.0.0.1:4222"


def check_serve_options(url: str, node_id: str | None) -> None:
    """``serve --cluster``'s arguments, checked before anything starts."""
    if not url.startswith(("nats://", "tls://")) or ":" not in url.split("//", 1)[1]:
        raise ConfigError(f"--cluster {url!r}: expected nats://HOST:PORT")
    if node_id is not None:
        from octosync.links.cluster_link import check_node_id

        check_node_id(node_id)


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OctosyncError(f"the server on port {port} exited with {proc.returncode}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=0.5),
        ):
            return
        time.sleep(0.1)
    raise OctosyncError(f"the server on port {port} did not answer /healthz in {timeout:g}s")


def start_node(
    url: str | None,
    node_id: str,
    port: int,
    data: Path,
    *,
    log: Path | None = None,
    extra: Sequence[str] = (),
    insecure_dev: bool = True,
) -> subprocess.Popen[bytes]:
    """``octosync serve --cluster URL --node-id ID`` on loopback, once it answers /healthz
    (``url`` None: a server alone, for a baseline; ``extra``: more ``serve`` options;
    ``insecure_dev`` off: tokens as the config's ``[auth]`` says)."""
    cluster = [] if url is None else ["--cluster", url, "--node-id", node_id]
    data.mkdir(parents=True, exist_ok=True)
    out = open(log or data / "serve.log", "ab")  # noqa: SIM115 (the child keeps it)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "octosync.cli",
                "serve",
                *(["--insecure-dev"] if insecure_dev else []),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data",
                str(data),
                *cluster,
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()
    try:
        _wait_healthy(port, proc)
    except BaseException:
        proc.kill()
        proc.wait(timeout=5)
        raise
    return proc


def _up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 16:
        raise ConfigError(f"--nodes {args.nodes}: expected 1 to 16")
    data = Path(args.data)
    state_path = data / STATE_FILE
    if state_path.exists():
        raise ConfigError(f"{state_path} exists: a cluster is up there (octosync cluster down)")
    data.mkdir(parents=True, exist_ok=True)
    nats = nats_server.start(data / "nats", args.nats_port, new_session=True)
    url = f"nats://127.0.0.1:{args.nats_port}"
    state: dict[str, Any] = {"nats": {"pid": nats.pid, "url": url}, "nodes": []}
    procs: list[subprocess.Popen[bytes]] = [nats]
    try:
        for i in range(args.nodes):
            node_id, port = f"n{i + 1}", args.port + i
            proc = start_node(url, node_id, port, data / node_id)
            procs.append(proc)
            state["nodes"].append(
                {"id": node_id, "pid": proc.pid, "url": f"ws://127.0.0.1:{port}/lazily"}
            )
    except BaseException:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(timeout=5)
        raise
    state_path.write_text(json.dumps(state, indent=2))
    print(f"NATS JetStream on {url}")
    for node in state["nodes"]:
        print(f"node {node['id']} on {node['url']} (pid {node['pid']})")
    print(
        f"Try:\n  octosync publish-demo score --url {state['nodes'][0]['url']}\n"
        f"  octosync watch score --url {state['nodes'][-1]['url']}\n"
        f"  octosync cluster status --cluster {url}\n"
        f"  octosync cluster down --data {data}",
        flush=True,
    )
    return 0


def _ours(pid: int) -> bool:
    """The process still runs one of the commands ``up`` started (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"octosync" in cmdline or b"nats-server" in cmdline


def _down(args: argparse.Namespace) -> int:
    state_path = Path(args.data) / STATE_FILE
    try:
        state = json.loads(state_path.read_text())
        pids = [int(n["pid"]) for n in state["nodes"]] + [int(state["nats"]["pid"])]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"no cluster to stop in {args.data}: {exc}") from None
    for group in (pids[:-1], pids[-1:]):  # the servers first, so they release what they own
        live = [pid for pid in group if _ours(pid)]
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_ours(pid) for pid in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in live:
            if _ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    state_path.unlink()
    print(f"stopped {len(pids) - 1} nodes and NATS")
    return 0


async def cluster_status(url: str, listen: float = 1.5) -> dict[str, Any]:
    """Nodes heard within ``listen`` seconds, their streams, owners and lag per stream."""
    from octosync.links.cluster_link import Subjects, connect, owners_bucket, stream_of
    from octosync.wire import cluster as wire

    subjects = Subjects("octosync")
    nc = await connect(url)
    beats: dict[str, wire.Heartbeat] = {}
    owners: dict[str, str] = {}
    try:

        async def heard(msg: Any) -> None:
            with contextlib.suppress(OctosyncError):
                beat = wire.decode(msg.data)
                if isinstance(beat, wire.Heartbeat):
                    beats[beat.node] = beat

        await nc.subscribe(subjects.heartbeat, cb=heard)
        kv = await owners_bucket(nc, subjects)
        with contextlib.suppress(Exception):  # nats-py raises when the bucket is empty
            for key in await kv.keys():
                entry = await kv.get(key)
                if entry.value:
                    owners[stream_of(key)] = entry.value.decode()
        await asyncio.sleep(listen)
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    head: dict[str, int] = {}
    for beat in beats.values():
        for name, load in beat.streams.items():
            if load.claim and load.epoch is not None:
                head[name] = load.epoch
    nodes = []
    for node in sorted(beats):
        beat = beats[node]
        streams = {}
        for name, load in sorted(beat.streams.items()):
            lag = None
            if name in head and load.epoch is not None:
                lag = max(0, head[name] - load.epoch)
            streams[name] = {
                "epoch": load.epoch,
                "subscribers": load.subscribers,
                "owner": bool(load.claim),
                "lag": lag,
            }
        nodes.append(
            {
                "node": node,
                "url": beat.url,
                "connections": beat.connections,
                "streams": streams,
                "documents_held": beat.documents_held,
                "documents": beat.documents,
                "maps_held": beat.maps_held,
                "maps": beat.maps,
            }
        )
    return {"nats": url, "nodes": nodes, "owners": owners}


def _status(args: argparse.Namespace) -> int:
    print(json.dumps(asyncio.run(cluster_status(args.cluster, args.listen)), indent=2))
    return 0


def register(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="octosync servers as a cluster over NATS",
        description="Start a local cluster, stop it, or show the state of one.",
    )
    commands = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    up = commands.add_parser(
        "up",
        help="start NATS and N servers on loopback, then return",
        description="Start nats-server (JetStream) and N 'octosync serve --cluster' processes.",
    )
    up.add_argument("--nodes", type=int, default=3, help="servers to start (3)")
    up.add_argument(
        "--data", default=DEFAULT_DATA, help=f"directory for all of it ({DEFAULT_DATA})"
    )
    up.add_argument("--nats-port", type=int, default=4222, help="NATS port on loopback (4222)")
    up.add_argument(
        "--port", type=int, default=8765, help="first server's port; the next ones follow (8765)"
    )
    up.set_defaults(func=_up)
    down = commands.add_parser(
        "down", help="stop a cluster 'up' started", description="Stop what 'up' started."
    )
    down.add_argument(
        "--data", default=DEFAULT_DATA, help=f"the directory 'up' used ({DEFAULT_DATA})"
    )
    down.set_defaults(func=_down)
    status = commands.add_parser(
        "status",
        help="nodes, streams per node, owners and lag (JSON)",
        description="Listen to the nodes' heartbeats and print nodes, streams, owners and lag.",
    )
    status.add_argument("--cluster", default=DEFAULT_URL, help=f"NATS URL ({DEFAULT_URL})")
    status.add_argument(
        "--listen", type=float, default=1.5, help="seconds to listen for heartbeats (1.5)"
    )
    status.set_defaults(func=_status)
