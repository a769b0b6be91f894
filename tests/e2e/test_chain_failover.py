"""Real processes: NATS, three links, twenty devices sending; SIGKILL the head, a middle link
and the tail in turn, restarting each so it rejoins; then every acknowledged event must have
been consumed exactly once and every link and device must hold the same state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from octosync.chain.game import consumed_sequencers
from octosync.links import nats_server
from octosync.links.cli import chain_status, fetch_status, start_node
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice
from octosync.store.chain import DeviceStore
from tests.e2e.helpers import free_port

CHAIN = "e2e"
APP = "octosync.chain.game:compute"
DEVICES = 20
WINDOW = 8
MAX_EVENTS = 400
"""Per device: the load is bounded in count as well as in time."""


async def until(predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
async def test_sigkill_head_middle_tail_loses_nothing_acknowledged(tmp_path: Path) -> None:
    nats_port = free_port()
    nats = nats_server.start(tmp_path / "nats", nats_port)
    url = f"nats://127.0.0.1:{nats_port}"
    procs: dict[str, subprocess.Popen[Any]] = {}

    async def launch(node_id: str) -> None:
        proc, _ = await asyncio.to_thread(start_node, CHAIN, node_id, url, APP, tmp_path / node_id)
        procs[node_id] = proc

    configs = await ConfigStore(url, CHAIN).open()
    devices: list[ChainDevice] = []
    stop = asyncio.Event()
    try:
        for node_id in ("n1", "n2", "n3"):
            await launch(node_id)

        async def steady() -> bool:
            """Three links, all past joining, agreeing on the epoch."""
            status = await chain_status(CHAIN, url)
            links = status["links"]
            return len(links) == 3 and all(
                e.get("role") in ("head", "middle", "tail") and e.get("epoch") == status["epoch"]
                for e in links
            )

        await until(steady, "the chain to form")
        for i in range(DEVICES):
            store = DeviceStore(tmp_path / f"d{i}.sqlite", durability="normal")
            device = ChainDevice(f"d{i}", configs=configs, store=store)
            devices.append(device)
            device.start()
            device.emit("join", json.dumps({"name": f"player{i}"}))

        async def send() -> None:
            n = 0
            while not stop.is_set() and n < MAX_EVENTS * DEVICES:
                for device in devices:
                    if device.live and device.unacked() < WINDOW:
                        device.emit("move", json.dumps({"dx": 1, "dy": n % 3 - 1}))
                        n += 1
                await asyncio.sleep(0.005)

        sender = asyncio.get_running_loop().create_task(send())

        async def tail_state() -> int:
            config, _ = await configs.read()
            assert config.tail is not None
            status = await fetch_status(config.tail.host, config.tail.port)
            return status.next_state_sequencer if status else 0

        for victim in ("head", "middle", "tail"):
            before = await tail_state()

            async def progressed(mark: int = before) -> bool:
                return await tail_state() > mark + 5

            await until(progressed, f"state to advance before killing the {victim}")
            config, _ = await configs.read()
            member = config.members[{"head": 0, "middle": 1, "tail": 2}[victim]]
            os.kill(procs[member.id].pid, signal.SIGKILL)
            procs[member.id].wait(timeout=10)
            await launch(member.id)
            await until(steady, f"the chain to heal after killing the {victim}")
            after = await tail_state()

            async def moving(mark: int = after) -> bool:
                return await tail_state() > mark

            await until(moving, f"state to move after the {victim} rejoined")

        stop.set()
        await sender

        async def quiet() -> bool:
            return all(d.live and not d.client.events for d in devices)

        await until(quiet, "every device's events to be consumed", timeout=60)

        async def converged() -> bool:
            status = await chain_status(CHAIN, url)
            states = {e.get("next_state") for e in status["links"]}
            if len(states) != 1 or status["event_lag"] != 0:
                return False
            (next_state,) = states
            return all(d.client.state_sequencer == next_state - 1 for d in devices)

        await until(converged, "links and devices to agree")
        config, _ = await configs.read()
        final = [await fetch_status(m.host, m.port) for m in config.members]
        assert all(s is not None for s in final)
        state = final[0].state  # type: ignore[union-attr]
        assert all(s.state == state for s in final)  # type: ignore[union-attr]
        assert isinstance(state, dict)
        acked_total = 0
        for device in devices:
            assert device.client.state == state, f"{device.name} sees another state"
            audit = state["audit"][device.name]
            assert audit["dup"] == 0, f"{device.name}: events consumed twice"
            consumed = consumed_sequencers(state, device.name)
            lost = device.acked - consumed
            assert not lost, f"{device.name}: acknowledged, never consumed: {sorted(lost)[:10]}"
            acked_total += len(device.acked)
        assert acked_total > DEVICES * 20
        assert sum(1 for d in devices if d.connections > 1) > 0  # devices did fail over
    finally:
        stop.set()
        for proc in [*procs.values(), nats]:  # processes first: nothing below may leak them
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
        for device in devices:
            await device.stop()
        await configs.close()
