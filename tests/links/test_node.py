"""A link process refuses frames from outside its configuration and devices that skip bootstrap."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from octosync.chain.records import DeviceEvent, Event
from octosync.links import frames
from octosync.links.cli import start_node


async def test_link_refuses_a_peer_that_is_not_its_predecessor(
    nats_url: str, tmp_path: Path
) -> None:
    proc: subprocess.Popen[str]
    proc, port = await asyncio.to_thread(
        start_node, "t2", "solo", nats_url, "octosync.chain.game:compute", tmp_path / "solo"
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frames.encode(frames.PeerHello(0, "intruder")))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, frames.Refused)
        assert reply.code == "StaleEpoch"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frames.encode(frames.DeviceHello(0, "dev")))
        writer.write(frames.encode(frames.FromDevice(0, DeviceEvent(1, "join", "{}"))))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, frames.Refused)
        assert reply.code == "NotBootstrapped"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frames.encode(frames.Link(0, Event("dev", 1, 1, "join", "{}"))))
        reply = await asyncio.wait_for(frames.read_frame(reader), 5)
        assert isinstance(reply, frames.Refused)
        assert reply.code == "StaleEpoch"
        writer.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
