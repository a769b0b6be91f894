"""``octosync chain up | node | status | device``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from octosync.chain.app import EXAMPLE_APP, load_app
from octosync.chain.records import BootstrapComplete, HeadToDevice, StateUpdate
from octosync.errors import OctosyncError
from octosync.links import frames, nats_server
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.links.node import NodeOptions, run_node
from octosync.store.chain import DeviceStore
from octosync.wire import chain_link

READY = "chain link {id} listening on {host}:{port}"


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def _node(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    host, port = _host_port(args.listen)
    try:
        app = load_app(args.app)
    except OctosyncError as exc:
        print(f"octosync: {exc}", file=sys.stderr)
        return 2

    def ready(actual: int) -> None:
        print(READY.format(id=args.id, host=host, port=actual), flush=True)

    options = NodeOptions(
        args.chain,
        args.id,
        host,
        port,
        args.config,
        app,
        Path(args.data),
        ready,
        durability=args.durability,
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            run_node(options)
    except OctosyncError as exc:  # its replica file is another link's, say
        print(f"octosync: {exc}", file=sys.stderr)
        return 2
    return 0


DURABILITY_ARGS = ("--durability",)
DURABILITY_OPTIONS: dict[str, Any] = {
    "choices": ["full", "normal"],
    "default": "full",
    "help": "full: fsync every commit (default); normal: survive a crash of the process, not "
    "of the machine (as JetStream's default file store)",
}


def start_node(
    chain: str,
    node_id: str,
    config_url: str,
    app: str,
    data: Path,
    *,
    port: int = 0,
    durability: str = "full",
) -> tuple[subprocess.Popen[str], int]:
    """Start ``octosync chain node`` as a process; returns it once it listens, with its port."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "octosync.links.cli",  # the chain commands alone: a restarted link starts faster
            "node",
            "--chain",
            chain,
            "--id",
            node_id,
            "--listen",
            f"127.0.0.1:{port}",
            "--config",
            config_url,
            "--app",
            app,
            "--data",
            str(data),
            "--durability",
            durability,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("chain link"):
        proc.kill()
        raise OctosyncError(f"link {node_id} did not start (exit {proc.wait()})")
    return proc, int(line.rsplit(":", 1)[1])


def _up(args: argparse.Namespace) -> int:
    data = Path(args.data or tempfile.mkdtemp(prefix="octosync-chain-"))
    nats = nats_server.start(data / "nats", args.nats_port)
    url = f"nats://127.0.0.1:{args.nats_port}"
    procs: list[subprocess.Popen[Any]] = [nats]
    try:
        print(f"NATS JetStream on {url} (data in {data})", flush=True)
        for i in range(args.nodes):
            node_id = f"n{i + 1}"
            proc, port = start_node(
                args.chain, node_id, url, args.app, data / node_id, durability=args.durability
            )
            procs.append(proc)
            print(f"link {node_id} on 127.0.0.1:{port}", flush=True)
        print(
            f"chain {args.chain!r} is up. Try:\n"
            f"  octosync chain status --chain {args.chain} --config {url}\n"
            f"  octosync chain device --chain {args.chain} --config {url} --name alice",
            flush=True,
        )
        wait_for_stop()
    except KeyboardInterrupt:
        pass
    finally:
        stop_all(procs)
    return 0


def wait_for_stop() -> None:
    """Block until SIGINT or SIGTERM (call it after the children started: they inherit the
    signal mask)."""
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    signal.sigwait(stop)


def stop_all(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """Terminate the processes, the last started first, and wait for each (bounded)."""
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


async def fetch_status(host: str, port: int, epoch: int = 0) -> chain_link.Status | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(chain_link.encode(chain_link.StatusRequest(epoch)))
        frame = await asyncio.wait_for(frames.read_frame(reader), 2)
        return frame if isinstance(frame, chain_link.Status) else None
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


async def chain_status(chain: str, url: str) -> dict[str, Any]:
    configs = await ConfigStore(url, chain).open()
    try:
        config, revision = await configs.read()
        alive = await configs.alive()
    finally:
        await configs.close()
    links = []
    for member in config.members:
        status = await fetch_status(member.host, member.port)
        entry: dict[str, Any] = {"id": member.id, "address": member.address}
        entry["alive"] = member.id in alive
        if status is not None:
            entry.update(
                role=status.role,
                epoch=status.epoch,
                next_chain=status.next_chain_sequencer,
                trim=status.trim,
                next_state=status.next_state_sequencer,
                acked_through=status.acked_through,
                live_events=status.live_events,
                devices=status.devices,
            )
        links.append(entry)
    head = config.head.id if config.head else None
    tail = config.tail.id if config.tail else None
    chains = [e["next_chain"] for e in links if "next_chain" in e]
    states = [e["next_state"] for e in links if "next_state" in e]
    return {
        "chain": chain,
        "epoch": config.epoch,
        "revision": revision,
        "head": head,
        "tail": tail,
        "event_lag": (max(chains) - min(chains)) if chains else None,
        "state_lag": (max(states) - min(states)) if states else None,
        "links": links,
    }


def _status(args: argparse.Namespace) -> int:
    print(json.dumps(asyncio.run(chain_status(args.chain, args.config)), indent=2))
    return 0


async def _demo_device(args: argparse.Namespace) -> None:
    configs = await ConfigStore(args.config, args.chain).open()
    store = DeviceStore(Path(args.data) / f"{args.name}.sqlite") if args.data else None
    device = ChainDevice(args.name, configs=configs, store=store)
    device.start()
    try:
        device.emit("join", json.dumps({"name": args.name}))
        for i in range(args.events):
            await asyncio.sleep(args.interval)
            if i % 5 == 4:
                device.emit("score", json.dumps({"points": 1}))
            else:
                device.emit("move", json.dumps({"dx": (i % 3) - 1, "dy": 1 - (i % 2)}))
            player = (device.client.state or {}).get("players", {}).get(args.name)
            print(
                json.dumps(
                    {
                        "sent": i + 2,
                        "acked": len(device.acked),
                        "state": device.client.state_sequencer,
                        "me": player,
                    }
                ),
                flush=True,
            )
    finally:
        await device.stop()
        await configs.close()


def _device(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_demo_device(args))
    return 0


async def _watch_state(args: argparse.Namespace) -> None:
    """An observer: bootstraps like a device that never emits, prints each new state."""
    configs = await ConfigStore(args.config, args.chain).open()
    seen = 0
    printed = asyncio.Event()

    def show(message: HeadToDevice) -> None:
        nonlocal seen
        if isinstance(message, BootstrapComplete | StateUpdate):
            seen += 1
            line = {"state_sequencer": device.client.state_sequencer, "state": device.client.state}
            print(json.dumps(line), flush=True)
            if args.limit is not None and seen >= args.limit:
                printed.set()

    device = ChainDevice(args.name, configs=configs, listener=show)
    device.start()
    try:
        await printed.wait()
    finally:
        await device.stop()
        await configs.close()


def _watch(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch_state(args))
    return 0


def _publish(args: argparse.Namespace) -> int:
    from octosync.links.publish import publish_chain

    def ready(publication: Any) -> None:
        print(f"publishing chain {args.chain!r} as stream {publication.stream!r}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            publish_chain(
                args.chain,
                args.config,
                args.url,
                token=args.token,
                name=args.name,
                ready=ready,
            )
        )
    return 0


def register(sub: Any) -> None:
    chain = sub.add_parser("chain", help="Octoprotocol chain replication")
    commands = chain.add_subparsers(dest="chain_command", required=True)
    url = "nats://127.0.0.1:4222"

    up = commands.add_parser("up", help="start NATS and a chain of links locally")
    up.add_argument("--nodes", type=int, default=3, help="links in the chain (3)")
    up.add_argument("--chain", default="demo", help="chain name (demo)")
    up.add_argument("--app", default=EXAMPLE_APP, help="module:function computing the state")
    up.add_argument("--data", default=None, help="directory for NATS and the links")
    up.add_argument("--nats-port", type=int, default=4222, help="NATS port on loopback (4222)")
    up.add_argument(*DURABILITY_ARGS, **DURABILITY_OPTIONS)
    up.set_defaults(func=_up)

    node = commands.add_parser("node", help="run one link of a chain")
    node.add_argument("--chain", required=True, help="chain name")
    node.add_argument("--id", required=True, help="this link's id in the configuration")
    node.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (loopback by default)")
    node.add_argument("--config", default=url, help="NATS URL holding the configuration")
    node.add_argument("--app", default=EXAMPLE_APP, help="module:function computing the state")
    node.add_argument("--data", required=True, help="directory for this link's SQLite replica")
    node.add_argument(*DURABILITY_ARGS, **DURABILITY_OPTIONS)
    node.set_defaults(func=_node)

    status = commands.add_parser("status", help="members, epoch, head, tail, lag")
    status.add_argument("--chain", default="demo", help="chain name (demo)")
    status.add_argument("--config", default=url, help=f"NATS URL ({url})")
    status.set_defaults(func=_status)

    device = commands.add_parser("device", help="a demo device: joins, moves, scores, prints")
    device.add_argument("--chain", default="demo", help="chain name (demo)")
    device.add_argument("--config", default=url, help=f"NATS URL ({url})")
    device.add_argument("--name", required=True, help="the device (player) name")
    device.add_argument("--events", type=int, default=20, help="events to send (20)")
    device.add_argument("--interval", type=float, default=0.5, help="seconds between events")
    device.add_argument("--data", default=None, help="directory for the device's SQLite file")
    device.set_defaults(func=_device)

    watch = commands.add_parser("watch", help="print the chain's state as it changes (observer)")
    watch.add_argument("--chain", default="demo", help="chain name (demo)")
    watch.add_argument("--config", default=url, help=f"NATS URL ({url})")
    watch.add_argument("--name", default="observer", help="observer name (never sends events)")
    watch.add_argument("--limit", type=int, default=None, help="stop after N states")
    watch.set_defaults(func=_watch)

    server = "ws://127.0.0.1:8765/lazily"
    publish = commands.add_parser(
        "publish", help="serve the chain's state as stream chain:NAME on an octosync server"
    )
    publish.add_argument("--chain", default="demo", help="chain name (demo)")
    publish.add_argument("--config", default=url, help=f"NATS URL ({url})")
    publish.add_argument(
        "--server",
        "--url",
        dest="url",
        default=server,
        help=f"the octosync server's lazily endpoint ({server})",
    )
    publish.add_argument(
        "--token",
        default=None,
        help="JWT granting publish on chain:NAME and $chain:NAME (unless --insecure-dev)",
    )
    publish.add_argument(
        "--name", default=None, help="the watcher's device name (default: host and pid)"
    )
    publish.set_defaults(func=_publish)


def main(argv: list[str] | None = None) -> int:
    """``python -m octosync.links.cli node ...``: the chain commands without the server's."""
    parser = argparse.ArgumentParser(prog="octosync chain")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["chain", *(sys.argv[1:] if argv is None else argv)])
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
