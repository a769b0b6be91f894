"""asyncio client for WVP: JS-ABI packets over WebSocket binary frames (``ws://.../wvp``) or
back to back on a Unix socket (``unix:/path``, what ``serve --wvp-socket`` listens on)."""

from __future__ import annotations

import asyncio
import collections
import itertools
from types import TracebackType
from typing import Any

import aiohttp

from octosync.client.ws import close_ws, connect_ws
from octosync.errors import HandshakeFailed, OctosyncError, ProtocolError, by_name
from octosync.warp.consumer import WarpConsumer, WarpProducer
from octosync.wire import jsabi, wvp

UNIX = "unix:"


def as_error(payload: wvp.ErrorPayload) -> OctosyncError:
    try:
        cls = by_name(payload.name)
    except KeyError:
        cls = ProtocolError
    details = payload.details
    path = details.get("path") if isinstance(details, dict) else None
    return cls(payload.message, path=path if isinstance(path, str) else None)


Incoming = wvp.WarpStream | wvp.Notification | wvp.ResyncRequest


class WvpClient:
    """One connection: ``subscribe``/``follow``/``publish_snapshot``/``publish_diff``, then
    ``receive()``.

    ``receive()`` returns the next ``WarpStream``, ``Notification`` or (for a producer) a
    ``ResyncRequest``; an ``error`` from the hub is raised as the typed error it names. A warp
    taken with ``follow`` is also applied to its ``WarpConsumer`` (``views[warp_id]``): a
    gap or a state-hash mismatch is raised once as ``EpochGap``/``Desync`` after a resync
    request went to the hub, and the view is live again at the producer's next snapshot.
    """

    def __init__(self, url: str, *, token: str | None = None, agent_id: str | None = None) -> None:
        self.url = url
        self.token = token
        self.agent_id = agent_id
        self.ack: wvp.HandshakeAck | None = None
        self.views: dict[int, WarpConsumer] = {}
        self._ts = itertools.count(1)
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._packets = jsabi.PacketDecoder()
        self._pending: collections.deque[bytes] = collections.deque()

    @property
    def session_id(self) -> str:
        """This connection's id as the hub named it (what ``hand_over`` takes)."""
        assert self.ack is not None
        return self.ack.session_id

    async def __aenter__(self) -> WvpClient:
        if self.url.startswith(UNIX):
            self._reader, self._writer = await asyncio.open_unix_connection(self.url[len(UNIX) :])
        else:
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
        if self._writer is not None:
            self._writer.close()
        await close_ws(self._ws, self._http)

    async def _send(self, msg: wvp.Message) -> None:
        packet = wvp.encode(msg, next(self._ts))
        if self._writer is not None:
            self._writer.write(packet)
            await self._writer.drain()
            return
        assert self._ws is not None
        await self._ws.send_bytes(packet)

    async def _next(self, timeout: float | None = None) -> wvp.Message:
        return (await asyncio.wait_for(self._next_payload(), timeout))[0]

    async def _next_payload(self) -> tuple[wvp.Message, int]:
        if self._reader is not None:
            while not self._pending:
                chunk = await self._reader.read(65536)
                if not chunk:
                    raise ConnectionError("connection ended (EOF)")
                self._pending.extend(self._packets.feed(chunk))
            return wvp.decode_payload(self._pending.popleft())
        assert self._ws is not None
        raw = await self._ws.receive()
        if raw.type != aiohttp.WSMsgType.BINARY:
            raise ConnectionError(f"connection ended ({raw.type.name})")
        return wvp.decode(raw.data)

    async def subscribe(self, warp_id: int) -> None:
        await self._send(wvp.SubscribeWarp(warp_id=warp_id))

    async def follow(self, warp_id: int) -> WarpConsumer:
        """Subscribe and keep the warp's reference render graph, verified frame by frame."""
        view = self.views.setdefault(warp_id, WarpConsumer(warp_id))
        await self.subscribe(warp_id)
        return view

    async def publish_snapshot(
        self, warp_id: int, epoch: int, graph: Any, state_hash: bytes | None = None
    ) -> None:
        await self._send(wvp.WarpStream(warp_id, wvp.WarpSnapshot(epoch, graph, state_hash)))

    async def publish_diff(
        self, warp_id: int, from_epoch: int, ops: Any, state_hash: bytes | None = None
    ) -> None:
        diff = wvp.WarpDiff(from_epoch, from_epoch + 1, ops, state_hash)
        await self._send(wvp.WarpStream(warp_id, diff))

    async def publish(self, warp_id: int, frame: wvp.WarpSnapshot | wvp.WarpDiff) -> None:
        """Send a frame a ``WarpProducer`` made (it carries its state hash)."""
        await self._send(wvp.WarpStream(warp_id, frame))

    async def answer_resync(self, warp_id: int, producer: WarpProducer) -> None:
        """What a producer does with a ``ResyncRequest``: a fresh snapshot for everyone."""
        await self.publish(warp_id, producer.snapshot())

    async def request_resync(
        self, warp_id: int, epoch: int | None = None, reason: str | None = None
    ) -> None:
        await self._send(wvp.ResyncRequest(warp_id, epoch, reason))

    async def hand_over(self, warp_id: int, session_id: str) -> None:
        """Give the warp this connection produces to the connection named ``session_id``."""
        await self._send(wvp.HandOver(warp_id, session_id))

    async def notify(self, note: wvp.Notification) -> None:
        await self._send(note)

    async def receive(self, timeout: float | None = None) -> Incoming:
        msg = await self._next(timeout)
        if isinstance(msg, wvp.ErrorPayload):
            raise as_error(msg)
        if not isinstance(msg, Incoming):
            raise ProtocolError(f"unexpected {wvp.OPS[type(msg)]} from the hub")
        if isinstance(msg, wvp.WarpStream) and msg.warp_id in self.views:
            view = self.views[msg.warp_id]
            last_good = view.epoch
            try:
                view.apply(msg.frame)
            except ProtocolError as err:
                await self.request_resync(msg.warp_id, last_good, err.name)
                raise
        return msg
