"""A link process fences: frames from outside its configuration, devices that skip bootstrap,
and (as the removed side) a link that hung and woke up out of the configuration."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from pathlib import Path

from octosync.chain.game import compute
from octosync.chain.records import DeviceEvent, Event
from octosync.links import frames
from octosync.links.cli import start_node
from octosync.links.config import Member
from octosync.links.config_store import ConfigStore
from octosync.links.node import Node, NodeOptions
from octosync.wire import chain_link


async def test_link_refuses_a_peer_that_is_not_its_predecessor(
    nats_url: str, tmp_path: Path
) -> None:
    proc: subprocess.Popen[str]
    proc, port = await asyncio.to_thread(
        start_node, "t2", "solo", nats_url, "octosync.chain.game:compute", tmp_path / "solo"
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(chain_link.encode(chain_link.PeerHello(0, "intruder")))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, chain_link.Refused)
        assert reply.code == "StaleEpoch"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(chain_link.encode(chain_link.DeviceHello(0, "dev")))
        writer.write(chain_link.encode(chain_link.FromDevice(0, DeviceEvent(1, "join", "{}"))))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, chain_link.Refused)
        assert reply.code == "NotBootstrapped"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(chain_link.encode(chain_link.Forward(0, Event("dev", 1, 1, "join", "{}"))))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, chain_link.Refused)
        assert reply.code == "StaleEpoch"
        writer.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_hung_link_is_removed_and_stops_when_it_wakes(nats_url: str, tmp_path: Path) -> None:
    """SIGSTOP keeps a link's sockets open; its expired heartbeat gets it removed, and once
    resumed it finds itself outside the configuration and exits."""
    app = "octosync.chain.game:compute"
    first, _ = await asyncio.to_thread(start_node, "hang", "n1", nats_url, app, tmp_path / "n1")
    second, _ = await asyncio.to_thread(start_node, "hang", "n2", nats_url, app, tmp_path / "n2")
    configs = await ConfigStore(nats_url, "hang").open()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while (await configs.read())[0].ids() != ["n1", "n2"]:
            assert asyncio.get_running_loop().time() < deadline, "n2 never joined"
            await asyncio.sleep(0.05)
        os.kill(second.pid, signal.SIGSTOP)
        while (await configs.read())[0].ids() != ["n1"]:
            assert asyncio.get_running_loop().time() < deadline + 20, "hung n2 never removed"
            await asyncio.sleep(0.05)
        os.kill(second.pid, signal.SIGCONT)
        assert await asyncio.to_thread(second.wait, 20) == 0
    finally:
        await configs.close()
        for proc in (first, second):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=10)


async def test_probe_needs_an_answer_not_just_an_accepted_connection(
    nats_url: str, tmp_path: Path
) -> None:
    """A SIGKILLed link's listening socket can accept for an instant while it dies; such a
    link must be found dead (removed now), not alive (left to its heartbeat's expiry)."""

    async def dying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.abort()

    server = await asyncio.start_server(dying, "127.0.0.1", 0)
    dying_port = server.sockets[0].getsockname()[1]
    app = "octosync.chain.game:compute"
    proc, live_port = await asyncio.to_thread(
        start_node, "probe", "live", nats_url, app, tmp_path / "live"
    )
    prober = Node(
        NodeOptions("probe", "prober", "127.0.0.1", 0, nats_url, compute, tmp_path / "prober")
    )
    try:
        assert not await prober._probe(Member("dying", "127.0.0.1", dying_port))
        assert await prober._probe(Member("live", "127.0.0.1", live_port))
    finally:
        server.close()
        prober.store.close()
        proc.kill()
        proc.wait(timeout=10)
