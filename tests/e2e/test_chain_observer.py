"""Observers through the hub, with real processes: NATS, three links, ``octosync serve`` and
``octosync chain publish``. A ``/lazily`` subscriber (the Python client) sees the chain's state
change as devices send events, and keeps seeing it, on one gapless stream, after the tail and
then the head are SIGKILLed. A token that may publish every stream still cannot pose as the
chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from octosync.chain.state_cells import state_of
from octosync.client import State, connect
from octosync.errors import Forbidden
from octosync.graph import Context
from octosync.links import nats_server
from octosync.links.cli import chain_status, fetch_status, start_node
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.server.auth import issue_token
from tests.e2e.helpers import Follower, free_port, spawn_server, ws_lazily
from tests.e2e.test_chain_failover import until

CHAIN = "obs"
STREAM = f"chain:{CHAIN}"
APP = "octosync.chain.game:compute"
SECRET = "o" * 32
DEVICES = 4
PUBLISH = [sys.executable, "-m", "octosync.cli", "chain", "publish"]
MAX_EVENTS = 300
"""Per device: the load is bounded in count as well as in time."""


def audited(state: Any) -> int:
    """Events the game consumed, over every device (0 before the first)."""
    if not isinstance(state, dict):
        return 0
    return sum(a["n"] for a in state.get("audit", {}).values())


@pytest.mark.slow
async def test_lazily_subscribers_see_the_chain_through_tail_and_head_failures(
    tmp_path: Path,
) -> None:
    nats_port = free_port()
    nats = nats_server.start(tmp_path / "nats", nats_port)
    url = f"nats://127.0.0.1:{nats_port}"
    links: dict[str, subprocess.Popen[Any]] = {}
    publisher: subprocess.Popen[str] | None = None
    devices: list[ChainDevice] = []
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    toml = tmp_path / "server.toml"
    toml.write_text(f'[auth]\nhs256_secret = "{SECRET}"\n')
    configs = await ConfigStore(url, CHAIN).open()
    try:
        for node_id in ("n1", "n2", "n3"):
            proc, _ = await asyncio.to_thread(
                start_node, CHAIN, node_id, url, APP, tmp_path / node_id
            )
            links[node_id] = proc

        async def members(n: int) -> bool:
            status = await chain_status(CHAIN, url)
            return len(status["links"]) == n and all(
                e.get("role") in ("head", "middle", "tail", "head+tail")
                and e.get("epoch") == status["epoch"]
                for e in status["links"]
            )

        await until(lambda: members(3), "the chain to form")
        async with spawn_server(tmp_path / "server", "--config", str(toml)) as server:
            lazily = f"{server.url}/lazily"
            token = issue_token(
                SECRET, "publisher", {STREAM: ["publish"], f"${STREAM}": ["publish"]}
            )
            publisher = subprocess.Popen(
                [*PUBLISH, "--chain", CHAIN, "--config", url, "--server", lazily, "--token", token],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert publisher.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(publisher.stdout.readline), 60)
            assert f"as stream {STREAM!r}" in line, (line, publisher.poll())

            everything = {"*": ["read", "publish", "write"]}
            rogue = issue_token(SECRET, "rogue", everything)
            async with connect(lazily, token=rogue) as client:
                with pytest.raises(Forbidden, match=r"\$chain:obs"):
                    await asyncio.wait_for(client.publish(STREAM, Context()), 10)

            reader = issue_token(SECRET, "reader", {"*": ["read"]})
            states: list[State] = []
            follower = Follower()
            async with (
                connect(lazily, token=reader) as client,
                aiohttp.ClientSession() as http,
            ):
                sub = await client.subscribe(STREAM)
                raw, reply = await ws_lazily(http, server.url, STREAM, token=reader)
                assert "error" not in json.dumps(reply).lower(), reply

                async def collect() -> None:
                    async for state in sub:
                        states.append(state)

                async def follow() -> None:
                    async for msg in raw:
                        follower.feed(msg.data)

                tasks += [asyncio.create_task(collect()), asyncio.create_task(follow())]
                for i in range(DEVICES):
                    device = ChainDevice(f"d{i}", configs=configs)
                    devices.append(device)
                    device.start()
                    device.emit("join", json.dumps({"name": f"player{i}"}))

                async def send() -> None:
                    sent = 0
                    while not stop.is_set() and sent < MAX_EVENTS * DEVICES:
                        for device in devices:
                            if device.live and device.unacked() < 4:
                                device.emit("move", json.dumps({"dx": 1, "dy": 0}))
                                sent += 1
                        await asyncio.sleep(0.01)

                tasks.append(asyncio.create_task(send()))

                def seen() -> int:
                    return audited(state_of(states[-1].by_name)[0]) if states else 0

                async def beyond(mark: int) -> bool:
                    return seen() > mark

                await until(lambda: beyond(DEVICES * 5), "the subscriber to see events consumed")
                players = state_of(states[-1].by_name)[0]["players"]
                assert sorted(players) == [f"d{i}" for i in range(DEVICES)]
                for victim in (-1, 0):  # the tail, then the head (the publisher's own link)
                    config, _ = await configs.read()
                    member = config.members[victim]
                    os.kill(links[member.id].pid, signal.SIGKILL)
                    await asyncio.to_thread(links[member.id].wait, 10)
                    left = len(config.members) - 1
                    await until(lambda n=left: members(n), "the chain to heal")
                    mark = seen()
                    await until(lambda m=mark: beyond(m + 20), f"states after killing {member.id}")

                stop.set()
                await tasks.pop()

                async def quiet() -> bool:
                    return all(d.live and not d.client.events for d in devices)

                await until(quiet, "every device's events to be consumed", timeout=60)
                config, _ = await configs.read()
                assert config.tail is not None

                async def caught_up() -> bool:
                    status = await fetch_status(config.tail.host, config.tail.port)  # type: ignore[union-attr]
                    if status is None or not states:
                        return False
                    last = state_of(states[-1].by_name)
                    return last == (status.state, status.next_state_sequencer - 1)

                await until(caught_up, "the subscriber to hold the tail's state")
                final = state_of(states[-1].by_name)[0]
                assert audited(final) == sum(len(d.acked) for d in devices)
                assert all(a["dup"] == 0 for a in final["audit"].values())
                sequencers = [s.by_name["$sequencer"] for s in states]
                assert sequencers == sorted(sequencers)  # the chain's order, never backwards
                epochs = [s.epoch for s in states]
                assert epochs == sorted(set(epochs))
                assert sub.resyncs == 0
                assert sub.reconnects == 0
                assert follower.snapshots == 1, "one snapshot, then deltas only"
                assert follower.gaps == 0
                assert follower.errors == []
                assert follower.deltas >= len(states) - 1
                assert publisher.poll() is None  # the publisher rode out both failures
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for proc in [*links.values(), *([publisher] if publisher else []), nats]:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
        for device in devices:
            await device.stop()
        await configs.close()
