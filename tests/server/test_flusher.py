"""The flusher over a real loopback socket: ``send_now`` writes at once only when nothing is
queued before the frame, so frames never overtake each other."""

from __future__ import annotations

import asyncio
import time

from octosync.hub import Hub, HubConfig
from octosync.hub.types import ViewKey
from octosync.server.flusher import Flusher
from tests.hub.helpers import json_encoder

CONN = 1


class Received(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.more = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.more.set()


async def _until(received: Received, want: bytes) -> None:
    async with asyncio.timeout(10):
        while len(received.data) < len(want):
            received.more.clear()
            await received.more.wait()


async def test_send_now_writes_at_once_but_never_before_a_queued_frame() -> None:
    loop = asyncio.get_running_loop()
    received = Received()
    server = await loop.create_server(lambda: received, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    hub = Hub(HubConfig(), clock=time.monotonic, encoders={"json": json_encoder})
    flusher = Flusher(hub)
    hub.connect(CONN, ViewKey("lazily", "json"), wake=flusher.wake)
    flusher.attach(CONN, transport)
    try:
        assert flusher.send_now(CONN, b"one;")  # nothing queued: written now
        hub.send_control(CONN, b"two;")  # queued (flushed on the next loop turn)
        assert not flusher.send_now(CONN, b"three;")  # would overtake "two"
        assert hub.send_lossless(CONN, b"three;")  # so the caller queues it behind
        await _until(received, b"one;two;three;")
        assert received.data == b"one;two;three;"
        assert flusher.send_now(CONN, b"four;")  # drained: direct again
        await _until(received, b"one;two;three;four;")
        assert received.data == b"one;two;three;four;"
        assert hub.stats.frames_out == 4
        assert not flusher.send_now(2, b"x")  # a connection it does not know
        flusher.detach(CONN)
        assert not flusher.send_now(CONN, b"five;")
    finally:
        transport.close()
        server.close()
        await server.wait_closed()
