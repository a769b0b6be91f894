"""The chain game in one command: NATS JetStream (the chain's configuration), two chain links
running this folder's rules (``coin_chase:compute``) and an octosync server that relays
browser players to the chain's head (``--port``, 8765; ``--no-serve`` to run your own:
``octosync serve --insecure-dev --chain-config nats://127.0.0.1:4222``), on loopback, until
Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from octosync.errors import OctosyncError
from octosync.links import nats_server
from octosync.links.cli import chain_status, start_node, stop_all, wait_for_stop

HERE = Path(__file__).resolve().parent
APP = "coin_chase:compute"


def formed(chain: str, url: str, links: int) -> bool:
    """Every link answers with a role in the configuration's epoch."""
    with contextlib.suppress(Exception):
        status = asyncio.run(chain_status(chain, url))
        found = status["links"]
        return len(found) == links and all(
            e.get("role") in ("head", "middle", "tail") and e.get("epoch") == status["epoch"]
            for e in found
        )
    return False


def serve(url: str, port: int, data: Path) -> subprocess.Popen[bytes]:
    """``octosync serve`` relaying ``/chain/NAME`` to the chain, once it says it serves."""
    command = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
    command += ["--port", str(port), "--data", str(data), "--chain-config", url]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if "octosync serving" not in line:
        proc.wait()
        sys.exit(f"chain game: the server did not start (is port {port} taken? --port P)")
    return proc


def main(chain: str, links: int, nats_port: int, data: Path, port: int | None) -> None:
    # the links import the rules by name, from this folder
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
    )
    url = f"nats://127.0.0.1:{nats_port}"
    procs: list[subprocess.Popen[Any]] = [nats_server.start(data / "nats", nats_port)]
    try:
        for i in range(links):
            procs.append(start_node(chain, f"link{i + 1}", url, APP, data / f"link{i + 1}")[0])
        deadline = time.monotonic() + 30
        while not formed(chain, url, links):
            if time.monotonic() > deadline:
                sys.exit(f"chain game: the chain did not form within 30 s (data in {data})")
            time.sleep(0.2)
        pids = ", ".join(str(proc.pid) for proc in procs[1:])
        if port is None:
            then = f"next: octosync serve --insecure-dev --chain-config {url}\n"
        else:
            procs.append(serve(url, port, data / "server"))
            then = f"relayed by the server on http://127.0.0.1:{port}\n"
        query = "" if port in (None, 8765) else f"?server=ws://127.0.0.1:{port}"
        print(
            f"chain game {chain!r} up: {links} links (processes {pids}), configuration in {url} "
            f"(data in {data})\n{then}"
            f"then open examples/chain-game/index.html{query} in two tabs",
            flush=True,
        )
        wait_for_stop()
    finally:
        stop_all(procs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chain", default="game", help="the chain's name (game)")
    parser.add_argument("--links", type=int, default=2, help="links in the chain (2)")
    parser.add_argument("--nats-port", type=int, default=4222, help="NATS port on loopback")
    parser.add_argument("--data", type=Path, default=None, help="folder for NATS and the links")
    parser.add_argument("--port", type=int, default=8765, help="the relaying server's port")
    parser.add_argument(
        "--no-serve", action="store_true", help="start no server (run your own, as printed)"
    )
    args = parser.parse_args()
    data = args.data or Path(tempfile.mkdtemp(prefix="octosync-chain-game-"))
    try:
        main(args.chain, args.links, args.nats_port, data, None if args.no_serve else args.port)
    except OctosyncError as exc:  # no nats-server, a port taken, a link that did not start
        sys.exit(f"chain game: {exc}")
    except KeyboardInterrupt:
        pass
