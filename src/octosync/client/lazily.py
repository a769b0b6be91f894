"""asyncio client for the ``/lazily`` face: subscribe to a stream's mirrored state, or publish one.

::

    async with octosync.connect("ws://127.0.0.1:8765/lazily", token=...) as c:
        sub = await c.subscribe("scoreboard")
        async for state in sub:          # a State after every applied snapshot or delta
            print(state.epoch, state.values)

Each stream uses its own WebSocket (the handshake's ``session_id`` names the stream). A
subscription resyncs by itself when its mirror sees a gap or a desync, and reconnects with
jittered exponential backoff when the connection drops (to the next of ``fallbacks``, the
other nodes of a cluster, when the one in use cannot be reached). A publication streams a local
``Context`` through a ``Publisher``; after a reconnect it starts again from a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
import msgspec

from octosync.client.ws import connect_ws, failure_reason
from octosync.errors import AuthError, ForbiddenPublish, OctosyncError, ProtocolError, by_name
from octosync.graph import Context
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION
from octosync.ipc.messages import Delta, Handshake, ResyncRequest
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher
from octosync.wire import json as wire_json

_DROPPED: tuple[type[BaseException], ...] = (aiohttp.ClientError, ConnectionError, OSError)
"""What a failed (re)connection attempt raises: retried with backoff."""


@dataclass(frozen=True, slots=True)
class State:
    """A mirrored state: the stream's epoch, ``{node_id: decoded value}`` and, for nodes the
    producer named (``Context.cell(..., name=...)``), ``{name: node_id}``."""

    epoch: int
    values: dict[int, Any]
    names: dict[str, int] = field(default_factory=dict)

    @property
    def by_name(self) -> dict[str, Any]:
        """``{name: value}`` of the named nodes that hold a value."""
        return {n: self.values[i] for n, i in self.names.items() if i in self.values}


@dataclass(frozen=True, slots=True)
class Backoff:
    """Full-jitter exponential backoff: attempt n sleeps uniform(0, min(cap, base * 2**n))."""

    base: float = 0.05
    cap: float = 5.0
    max_attempts: int | None = None

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap, self.base * (2**attempt)))


class _ErrorFrame(msgspec.Struct, frozen=True):
    type: str
    code: str
    message: str
    path: str | None = None


def remote_error(raw: bytes | str) -> OctosyncError | None:
    """The typed error an error frame names, or None if ``raw`` is not an error frame."""
    try:
        frame = msgspec.json.decode(raw, type=_ErrorFrame)
    except msgspec.DecodeError:
        return None
    if frame.type != "error":
        return None
    try:
        cls = by_name(frame.code)
    except KeyError:
        cls = ProtocolError
    return cls(frame.message, path=frame.path)


def _handshake(stream: str, *, publish: bool, max_frame: int) -> Handshake:
    features = ["publish"] if publish else []
    return Handshake(
        protocol_id=PROTOCOL_ID,
        protocol_major_version=PROTOCOL_MAJOR_VERSION,
        codec="json",
        max_frame_size=max_frame,
        fragmentation_supported=False,
        ordered_reliable=True,
        peer_id=0,
        session_id=stream,
        features=tuple(features),
    )


class Client:
    """A connection factory for one server URL (``ws://host:port/lazily``)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        backoff: Backoff | None = None,
        max_frame_size: int = 1 << 20,
        seed: int | None = None,
        fallbacks: Sequence[str] = (),
        on_retry: Callable[[int, int | None, BaseException], None] | None = None,
    ) -> None:
        self.url = url
        self.urls = [url, *fallbacks]
        """Where to connect, in turn: a reconnect that fails moves on to the next."""
        self._at = 0
        self.token = token
        self.backoff = backoff or Backoff()
        self.max_frame_size = max_frame_size
        self._rng = random.Random(seed)
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriptions: list[Subscription] = []
        self.on_retry = on_retry
        """Called as ``on_retry(attempt, max_attempts, why)`` before each reconnect attempt
        after a failed one, so a tool can say that it lost the server and is retrying."""

    async def __aenter__(self) -> Client:
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for sub in self._subscriptions:
            sub._finish(ConnectionError("the client was closed"))
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _open(self, stream: str, *, publish: bool) -> aiohttp.ClientWebSocketResponse:
        if self._http is None:
            raise RuntimeError("use 'async with connect(...)' first")
        ws = await connect_ws(self._http, self.urls[self._at], self.token, max_msg_size=0)
        hs = _handshake(stream, publish=publish, max_frame=self.max_frame_size)
        await ws.send_bytes(wire_json.encode_handshake(hs))
        reply = await ws.receive()
        if reply.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            await ws.close()
            raise ConnectionError(f"connection closed during the handshake ({reply.type.name})")
        err = remote_error(reply.data)
        if err is not None:
            await ws.close()
            raise err
        wire_json.decode_handshake(reply.data)
        return ws

    async def _sleep_backoff(self, attempt: int, why: BaseException | None = None) -> None:
        self._at = (self._at + 1) % len(self.urls)
        limit = self.backoff.max_attempts
        if limit is not None and attempt >= limit:
            last = "" if why is None else f" (last: {failure_reason(why)})"
            raise ConnectionError(f"gave up after {attempt} reconnect attempts{last}")
        if self.on_retry is not None and why is not None:
            self.on_retry(attempt + 1, limit, why)
        await asyncio.sleep(self.backoff.delay(attempt, self._rng))

    # --- subscribing ----------------------------------------------------------------------

    async def subscribe(self, stream: str, *, queue_size: int = 64) -> Subscription:
        """Follow ``stream``; the first connection is made before this returns."""
        ws = await self._open(stream, publish=False)
        sub = Subscription(stream, queue_size)
        self._subscriptions.append(sub)
        task = asyncio.get_running_loop().create_task(self._follow(sub, ws))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return sub

    async def _reconnecting(
        self,
        stream: str,
        first: aiohttp.ClientWebSocketResponse,
        *,
        publish: bool,
        retry: tuple[type[BaseException], ...],
    ) -> AsyncGenerator[tuple[aiohttp.ClientWebSocketResponse, bool]]:
        """``first``, then a new connection each time the caller is done with the last one
        (each closed after use), as ``(ws, reconnected)``; a failed attempt (``retry``) backs
        off with jitter, and ``backoff.max_attempts`` failures in a row end it."""
        current: aiohttp.ClientWebSocketResponse | None = first
        attempt = 0
        while True:
            if current is None:
                try:
                    current = await self._open(stream, publish=publish)
                except retry as exc:
                    await self._sleep_backoff(attempt, exc)
                    attempt += 1
                    continue
            attempt = 0
            try:
                yield current, current is not first
            finally:
                await current.close()
            current = None

    async def _follow(self, sub: Subscription, ws: aiohttp.ClientWebSocketResponse) -> None:
        connections = self._reconnecting(sub.stream, ws, publish=False, retry=_DROPPED)
        try:
            async with contextlib.aclosing(connections):
                async for current, reconnected in connections:
                    sub.reconnects += reconnected
                    sub._ws = current
                    await self._pump(sub, current)
                    sub._ws = None
        except OctosyncError as exc:  # refused (a token that expired, a revoked grant)
            sub._finish(exc)
        except BaseException as exc:  # cancelled by close() too: end the iteration
            sub._finish(exc)
            raise
        finally:
            sub._ws = None

    async def _pump(self, sub: Subscription, ws: aiohttp.ClientWebSocketResponse) -> None:
        mirror = sub.mirror = Mirror()
        async for msg in ws:
            if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break
            err = remote_error(msg.data)
            if err is not None:
                sub.errors.append(err)
                continue
            result = mirror.apply(wire_json.decode(msg.data))
            if isinstance(result, ResyncRequest):
                sub.resyncs += 1
                await ws.send_bytes(wire_json.encode(result))
                continue
            last = mirror.last_epoch
            if mirror.in_sync and last is not None and last != sub._last_yielded:
                sub._push(State(last, mirror.values(), mirror.names()))

    # --- publishing -----------------------------------------------------------------------

    async def publish(
        self, stream: str, ctx: Context, *, permissions: PeerPermissions | None = None
    ) -> Publication:
        """Serve ``ctx`` as ``stream``: a snapshot now, then one delta per flush."""
        ws = await self._open(stream, publish=True)
        pub = Publication(stream, ctx, permissions or PeerPermissions.allow_all())
        task = asyncio.get_running_loop().create_task(self._serve(pub, ws))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        started = asyncio.ensure_future(pub.started.wait())
        ended = asyncio.ensure_future(pub.ended.wait())
        await asyncio.wait({started, ended}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        ended.cancel()
        if not pub.started.is_set():
            await pub.wait()  # raises the refusal that ended it
        return pub

    async def _serve(self, pub: Publication, ws: aiohttp.ClientWebSocketResponse) -> None:
        # ForbiddenPublish on reopening: the server has not yet noticed that our old connection
        # went away; it releases the stream when it does.
        retry = (*_DROPPED, ForbiddenPublish)
        connections = self._reconnecting(pub.stream, ws, publish=True, retry=retry)
        try:
            async with contextlib.aclosing(connections):
                async for current, reconnected in connections:
                    pub.reconnects += reconnected
                    # dropped mid-send: reconnect and start again from a snapshot
                    with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                        await self._stream_context(pub, current)
                    if pub.closed:
                        break
        except OctosyncError as exc:  # refused for good: no grant, a token that expired
            pub.failed = exc
        except ConnectionError as exc:  # gave up reconnecting (backoff.max_attempts)
            pub.lost = exc
        finally:
            pub.closed = True
            pub.ended.set()

    async def _stream_context(self, pub: Publication, ws: aiohttp.ClientWebSocketResponse) -> None:
        publisher = Publisher(pub.ctx, pub.permissions)
        changed = asyncio.Event()
        unsubscribe = pub.ctx.subscribe(lambda _changes: changed.set())

        async def reader() -> None:
            async for msg in ws:
                if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break
                err = remote_error(msg.data)
                if err is not None:
                    pub.errors.append(err)
                    if isinstance(err, AuthError):  # the server closes after these
                        raise err
                    continue
                try:
                    write = wire_json.decode(msg.data)
                except OctosyncError as exc:
                    pub.errors.append(exc)
                    continue
                if isinstance(write, Delta):
                    try:
                        publisher.apply_remote(list(write.ops))
                    except OctosyncError as exc:
                        pub.errors.append(exc)

        read_task = asyncio.get_running_loop().create_task(reader())
        try:
            await ws.send_bytes(wire_json.encode(publisher.snapshot()))
            publisher.drain()
            pub.started.set()
            while not ws.closed and not read_task.done():
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait({waiter, read_task}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                changed.clear()
                if publisher.lagged:
                    await ws.send_bytes(wire_json.encode(publisher.snapshot()))
                    publisher.drain()
                    continue
                for d in publisher.drain():
                    await ws.send_bytes(wire_json.encode(d))
                    pub.deltas_sent += 1
        finally:
            unsubscribe()
            publisher.close()
            read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read_task  # re-raises a refusal the reader saw


@dataclass(eq=False)
class Subscription:
    """An async iterator of ``State``s; slow consumers see the latest state, never a backlog."""

    stream: str
    queue_size: int = 64
    mirror: Mirror = field(default_factory=Mirror)
    errors: list[OctosyncError] = field(default_factory=list)
    resyncs: int = 0
    reconnects: int = 0
    failed: OctosyncError | None = None
    """Why the server ended this subscription for good (a refused reconnect), if it did."""
    lost: BaseException | None = None
    """Why the subscription ended otherwise: the client gave up reconnecting, or was closed."""
    _queue: asyncio.Queue[State | BaseException] = field(init=False)
    _ws: aiohttp.ClientWebSocketResponse | None = None
    _last_yielded: int | None = None
    _finished: bool = False

    def __post_init__(self) -> None:
        self._queue = asyncio.Queue(self.queue_size)

    def _push(self, state: State) -> None:
        self._last_yielded = state.epoch
        if self._queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self._queue.get_nowait()  # drop the oldest state: the newest supersedes it
        self._queue.put_nowait(state)

    def _finish(self, exc: BaseException) -> None:
        if self._finished:
            return
        self._finished = True
        if isinstance(exc, OctosyncError):
            self.failed = exc
        else:
            self.lost = exc
        if self._queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self._queue.get_nowait()
        self._queue.put_nowait(exc)

    def __aiter__(self) -> AsyncIterator[State]:
        return self

    async def __anext__(self) -> State:
        item = await self._queue.get()
        if isinstance(item, OctosyncError):
            self._queue.put_nowait(item)  # every later call raises it too
            raise item
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise StopAsyncIteration from item
        return item

    async def write(self, node: int | str, value: Any) -> None:
        """Ask the producer to set cell ``node`` (its id, or its name) to ``value``.

        Sent as a ``cell_set`` on the current connection; the producer applies it if the peer
        may write that cell, and the new value comes back as an ordinary state. A refusal
        (``Forbidden``: no write grant, or the producer's permissions) arrives later in
        ``errors``; a write is never queued across a reconnect.
        """
        ws = self._ws
        if ws is None or ws.closed:
            raise ConnectionError(f"stream {self.stream!r} is not connected; write not sent")
        await ws.send_bytes(wire_json.encode(self.mirror.write(node, value)))

    async def wait_for(self, predicate: Callable[[State], bool]) -> State:
        """The first state (from now on) that satisfies ``predicate``."""
        async for state in self:
            if predicate(state):
                return state
        raise ConnectionError("subscription ended")


@dataclass(eq=False)
class Publication:
    stream: str
    ctx: Context
    permissions: PeerPermissions
    errors: list[OctosyncError] = field(default_factory=list)
    deltas_sent: int = 0
    reconnects: int = 0
    closed: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)
    failed: OctosyncError | None = None
    """Why the server refused this publication for good, if it did."""
    lost: ConnectionError | None = None
    """Set when the client gave up reconnecting (``Backoff.max_attempts``)."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self) -> None:
        """Return when the publication ends; raise the server's refusal, or the
        ``ConnectionError`` of giving up reconnecting, if that is why."""
        await self.ended.wait()
        if self.failed is not None:
            raise self.failed
        if self.lost is not None:
            raise self.lost


def connect(url: str, *, token: str | None = None, **options: Any) -> Client:
    """``async with connect(url, token=...) as client:`` — see the module docstring."""
    return Client(url, token=token, **options)


__all__ = ["Backoff", "Client", "Publication", "State", "Subscription", "connect", "remote_error"]
