"""asyncio client for the ``/wvp`` face (JS-ABI packets over WebSocket binary frames)."""

from __future__ import annotations

import asyncio
import itertools
from types import TracebackType
from typing import Any

import aiohttp

from octosync.client.ws import close_ws, connect_ws
from octosync.errors import HandshakeFailed, OctosyncError, ProtocolError, by_name
from octosync.wire import wvp


def as_error(payload: wvp.ErrorPayload) -> OctosyncError:
    try:
        cls = by_name(payload.name)
    except KeyError:
        cls = ProtocolError
    details = payload.details
    path = details.get("path") if isinstance(details, dict) else None
    return cls(payload.message, path=path if isinstance(path, str) else None)


class WvpClient:
    """One connection: ``subscribe``/``publish_snapshot``/``publish_diff``, then ``receive()``.

    ``receive()`` returns the next ``WarpStream`` or ``Notification``; an ``error`` from the
    hub is raised as the typed error it names.
    """

    def __init__(self, url: str, *, token: str | None = None, agent_id: str | None = None) -> None:
        self.url = url
        self.token = token
        self.agent_id = agent_id
        self.ack: wvp.HandshakeAck | None = None
        self._ts = itertools.count(1)
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> WvpClient:
        self._http = aiohttp.ClientSession()
        self._ws = await connect_ws(self._http, self.url, self.token, max_msg_size=0)
        await self._send(wvp.Handshake(capabilities=(), client_version=1, agent_id=self.agent_id))
        msg = await self._next()
        if isinstance(msg, wvp.ErrorPayload):
            raise as_error(msg)
        if not isinstance(msg, wvp.HandshakeAck) or msg.status != "OK":
            raise HandshakeFailed(f"unexpected handshake reply {msg!r}")
        self.ack = msg
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await close_ws(self._ws, self._http)

    async def _send(self, msg: wvp.Message) -> None:
        assert self._ws is not None
        await self._ws.send_bytes(wvp.encode(msg, next(self._ts)))

    async def _next(self, timeout: float | None = None) -> wvp.Message:
        assert self._ws is not None
        raw = await asyncio.wait_for(self._ws.receive(), timeout)
        if raw.type != aiohttp.WSMsgType.BINARY:
            raise ConnectionError(f"connection ended ({raw.type.name})")
        msg, _ts = wvp.decode(raw.data)
        return msg

    async def subscribe(self, warp_id: int) -> None:
        await self._send(wvp.SubscribeWarp(warp_id=warp_id))

    async def publish_snapshot(
        self, warp_id: int, epoch: int, graph: Any, state_hash: bytes | None = None
    ) -> None:
        await self._send(wvp.WarpStream(warp_id, wvp.WarpSnapshot(epoch, graph, state_hash)))

    async def publish_diff(
        self, warp_id: int, from_epoch: int, ops: Any, state_hash: bytes | None = None
    ) -> None:
        diff = wvp.WarpDiff(from_epoch, from_epoch + 1, ops, state_hash)
        await self._send(wvp.WarpStream(warp_id, diff))

    async def notify(self, note: wvp.Notification) -> None:
        await self._send(note)

    async def receive(self, timeout: float | None = None) -> wvp.WarpStream | wvp.Notification:
        msg = await self._next(timeout)
        if isinstance(msg, wvp.ErrorPayload):
            raise as_error(msg)
        if not isinstance(msg, wvp.WarpStream | wvp.Notification):
            raise ProtocolError(f"unexpected {wvp.OPS[type(msg)]} from the hub")
        return msg
