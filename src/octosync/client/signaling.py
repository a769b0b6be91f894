"""asyncio client for ``/signal``: join a session, signal peers, read what arrives."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

import aiohttp

from octosync.client.ws import close_ws, connect_ws
from octosync.signaling.messages import (
    Answer,
    ClientSignal,
    Ice,
    Join,
    Leave,
    Offer,
    Relay,
    ServerSignal,
    SignalError,
    Welcome,
)
from octosync.wire.signaling import decode_server, encode_client


class SignalingRefused(Exception):
    """The relay answered with an error frame (``code`` is the seed's snake_case code)."""

    def __init__(self, frame: SignalError) -> None:
        super().__init__(f"{frame.code}: {frame.message}")
        self.code = frame.code


class SignalingClient:
    def __init__(self, url: str, session: str = "default", *, token: str | None = None) -> None:
        self.url = url
        self.session = session
        self.token = token
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> SignalingClient:
        self._http = aiohttp.ClientSession()
        self._ws = await connect_ws(
            self._http, self.url, self.token, params={"session": self.session}
        )
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await close_ws(self._ws, self._http)

    async def send(self, frame: ClientSignal) -> None:
        assert self._ws is not None
        await self._ws.send_bytes(encode_client(frame))

    async def join(self, peer: int, capabilities: tuple[str, ...] | None = None) -> Welcome:
        await self.send(Join(peer=peer, capabilities=capabilities))
        frame = await self.receive()
        if not isinstance(frame, Welcome):
            raise TypeError(f"expected welcome, got {frame!r}")
        return frame

    async def offer(self, to: int, sdp: str) -> None:
        await self.send(Offer(to=to, sdp=sdp))

    async def answer(self, to: int, sdp: str) -> None:
        await self.send(Answer(to=to, sdp=sdp))

    async def ice(self, to: int, candidate: str) -> None:
        await self.send(Ice(to=to, candidate=candidate))

    async def relay(self, to: int, payload: Any) -> None:
        await self.send(Relay(to=to, payload=payload))

    async def leave(self) -> None:
        await self.send(Leave())

    async def receive(self, timeout: float | None = None) -> ServerSignal:
        """The next frame for this peer; an error frame is raised as ``SignalingRefused``."""
        assert self._ws is not None
        msg = await asyncio.wait_for(self._ws.receive(), timeout)
        if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            raise ConnectionError(f"signaling connection ended ({msg.type.name})")
        frame = decode_server(msg.data)
        if isinstance(frame, SignalError):
            raise SignalingRefused(frame)
        return frame
