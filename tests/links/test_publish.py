"""``octosync chain publish`` against a real link, NATS and server: the state arrives as
cells, a second watcher cannot take the stream, and a refusal is one line on the command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from octosync.chain.state_cells import SEQUENCER, state_of
from octosync.client import connect
from octosync.errors import Forbidden
from octosync.links.cli import fetch_status, start_node
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.links.publish import publish_chain
from octosync.server.auth import AuthConfig, issue_token
from tests.e2e.helpers import serve

SECRET = "p" * 32
CHAIN = "pub"
STREAM = f"chain:{CHAIN}"


async def test_publish_serves_state_and_refuses_a_publisher_without_the_scope(
    nats_url: str, tmp_path: Path
) -> None:
    link, port = await asyncio.to_thread(
        start_node, CHAIN, "n1", nats_url, "octosync.chain.game:compute", tmp_path / "n1"
    )
    configs = await ConfigStore(nats_url, CHAIN).open()
    device = ChainDevice("ann", configs=configs)
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    auth = AuthConfig(hs256_secret=SECRET)
    try:
        async with serve(tmp_path / "server", auth=auth, insecure_dev=False) as server:
            lazily = f"{server.ws_url}/lazily"
            good = issue_token(SECRET, "pub", {STREAM: ["publish"], f"${STREAM}": ["publish"]})
            started = asyncio.Event()
            task = asyncio.create_task(
                publish_chain(
                    CHAIN, nats_url, lazily, token=good, ready=lambda _p: started.set(), stop=stop
                )
            )
            await asyncio.wait_for(started.wait(), 30)

            plain = issue_token(SECRET, "pub", {STREAM: ["publish"]})  # no $chain: scope
            with pytest.raises(Forbidden, match=r"\$chain:pub"):
                await asyncio.wait_for(
                    publish_chain(CHAIN, nats_url, lazily, token=plain, stop=stop), 30
                )
            assert not task.done()  # the refused one took nothing from the real publisher

            reader = issue_token(SECRET, "r", {"*": ["read"]})
            async with connect(lazily, token=reader) as client:
                sub = await client.subscribe(STREAM)
                device.start()
                device.emit("join", json.dumps({"name": "Ann"}))
                device.emit("score", json.dumps({"points": 4}))
                state = await asyncio.wait_for(
                    sub.wait_for(
                        lambda s: s.by_name.get("players", {}).get("ann", {}).get("score") == 4
                    ),
                    30,
                )
            status = await fetch_status("127.0.0.1", port)
            assert status is not None
            held, sequencer = state_of(state.by_name)
            assert sequencer == state.by_name[SEQUENCER]
            assert (held, sequencer) == (status.state, status.next_state_sequencer - 1)
            stop.set()
            await asyncio.wait_for(task, 10)
    finally:
        stop.set()
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await device.stop()
        await configs.close()
        link.kill()
        link.wait(timeout=10)


async def test_the_command_says_a_refusal_in_one_line(nats_url: str, tmp_path: Path) -> None:
    link, _ = await asyncio.to_thread(
        start_node, CHAIN, "n1", nats_url, "octosync.chain.game:compute", tmp_path / "n1"
    )
    auth = AuthConfig(hs256_secret=SECRET)
    try:
        async with serve(tmp_path / "server", auth=auth, insecure_dev=False) as server:
            everything = issue_token(SECRET, "rogue", {"*": ["read", "publish", "write"]})
            command = [sys.executable, "-m", "octosync.cli", "chain", "publish"]
            command += ["--chain", CHAIN, "--config", nats_url, "--token", everything]
            command += ["--server", f"{server.ws_url}/lazily"]
            proc = await asyncio.create_subprocess_exec(
                *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), 60)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert proc.returncode == 1
            (line,) = err.decode().strip().splitlines()
            assert line.startswith("octosync chain publish: Forbidden:"), line
            assert "$chain:pub" in line
            assert out == b""
    finally:
        link.kill()
        link.wait(timeout=10)
