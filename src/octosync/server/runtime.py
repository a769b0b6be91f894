"""Everything the faces share in one process: the hub, the flusher, signaling, counters."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from octosync.hub import Hub, HubConfig, OutboxLimits, OutFrame
from octosync.hub.core import AcceptHook
from octosync.hub.signaling import SignalingHub
from octosync.server.config import ServerConfig
from octosync.server.flusher import Flusher
from octosync.server.framing import u32_frame, ws_frame
from octosync.server.lazily_dialect import DIALECT_SET, Dialect
from octosync.wire import wvp


def warp_stream_id(warp_id: int) -> str:
    return f"warp:{warp_id}"


def _warp_id_of(stream: object) -> int:
    if not isinstance(stream, str) or not stream.startswith("warp:"):
        raise ValueError(f"{stream!r} is not a WVP stream id")
    return int(stream[5:])


@dataclass(slots=True)
class FaceCounters:
    connections: int = 0
    frames_in: int = 0
    bytes_in: int = 0
    errors: int = 0


@dataclass(slots=True)
class Counters:
    faces: dict[str, FaceCounters] = field(
        default_factory=lambda: {f: FaceCounters() for f in ("lazily", "tcp", "wvp", "signal")}
    )


Closer = Callable[[], Awaitable[object]]


def lazily_dialect_key(dialect: Dialect, transport: str) -> str:
    return f"lazily-{dialect.name}/{transport}"


class Runtime:
    def __init__(self, config: ServerConfig, on_accept: AcceptHook | None = None) -> None:
        self.config = config
        self.hub = Hub(
            HubConfig(
                outbox=OutboxLimits(
                    max_bytes=config.outbox_max_bytes, max_frames=config.outbox_max_frames
                ),
                retain_after_producer_leaves=config.retain_after_producer_leaves,
                coalesce_backlog=config.coalesce_backlog,
            ),
            clock=time.monotonic,
            on_accept=on_accept,
        )
        self.flusher = Flusher(self.hub, high_water=config.socket_high_water)
        self.signaling = SignalingHub(config.signaling)
        self.counters = Counters()
        self.closers: dict[int, Closer] = {}
        self.signal_transports: dict[int, asyncio.BaseTransport] = {}
        self.closing = False
        self._ids = itertools.count(1)
        self._expiry: asyncio.Task[None] | None = None
        for dialect in DIALECT_SET.values():
            self.register_lazily_dialect(dialect)
        self.hub.register_encoder("wvp/ws", self._encode_wvp)

    def new_conn_id(self) -> int:
        return next(self._ids)

    def register_lazily_dialect(self, dialect: Dialect) -> None:
        def for_ws(frame: OutFrame) -> bytes:
            return ws_frame(dialect.encode(frame.body), text=dialect.text)

        def for_tcp(frame: OutFrame) -> bytes:
            return u32_frame(dialect.encode(frame.body))

        self.hub.register_encoder(lazily_dialect_key(dialect, "ws"), for_ws)
        self.hub.register_encoder(lazily_dialect_key(dialect, "tcp"), for_tcp)

    def _encode_wvp(self, frame: OutFrame) -> bytes:
        body = frame.body
        if isinstance(body, wvp.WarpSnapshot | wvp.WarpDiff):
            msg: wvp.Message = wvp.WarpStream(_warp_id_of(frame.stream), body)
        else:
            assert isinstance(body, wvp.ErrorPayload | wvp.Notification)
            msg = body
        return ws_frame(wvp.encode(msg, frame.ts), text=False)

    async def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.hub.expire()

    async def shutdown(self) -> None:
        """Stop taking work, flush outboxes until the deadline, then close every connection."""
        self.closing = True
        if self._expiry is not None:
            self._expiry.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_deadline
        self.flusher.flush_all()
        while self.flusher.pending() and loop.time() < deadline:
            await asyncio.sleep(0.01)
            self.flusher.flush_all()
        closers = list(self.closers.values())
        self.closers.clear()
        await asyncio.gather(*(c() for c in closers), return_exceptions=True)
