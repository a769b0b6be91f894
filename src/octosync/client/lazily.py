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
from octosync.ipc.blobs import spill_blobs
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION
from octosync.ipc.messages import (
    CellSet,
    Delta,
    Handshake,
    RemoteOp,
    RemoteOpResult,
    ResyncRequest,
    Snapshot,
)
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions, apply_remote_write, trigger_remote_effect
from octosync.ipc.publisher import Publisher
from octosync.shm.region import REGION_FEATURE, SHARED_BLOB, SharedRegion, fresh_name
from octosync.wire import json as wire_json
from octosync.wire.lazily_dialects import decode_error_frame

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

    @property
    def keys(self) -> dict[str, int]:
        """``{name: node_id}``: ``names`` under the JavaScript client's name for it."""
        return self.names


def lazily_url(url: str) -> str:
    """The ``/lazily`` URL of a server given by its base URL (``ws://host:port``, as the
    JavaScript client takes it; ``http`` becomes ``ws``) or already by that URL."""
    base = url.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[4:]
    return base if base.endswith("/lazily") else base + "/lazily"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Full-jitter exponential backoff: attempt n sleeps uniform(0, min(cap, base * 2**n))."""

    base: float = 0.05
    cap: float = 5.0
    max_attempts: int | None = None

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap, self.base * (2**attempt)))


REMOTE_OPS = "remote_op"
"""The handshake feature of ``RemoteOp`` requests (``server.lazily_session``)."""


@dataclass(frozen=True, slots=True)
class Writer:
    """Who asked a producer for a write or an effect, as the server vouches: its connection
    on the server (``peer``) and its token's subject (None with ``--insecure-dev``)."""

    peer: int
    subject: str | None


PermissionsFor = Callable[[Writer], PeerPermissions]
"""A producer's permissions per writer (``Client.publish(permissions_for=...)``)."""


def _error_from(result: RemoteOpResult) -> OctosyncError:
    try:
        cls = by_name(result.error or "")
    except KeyError:
        cls = ProtocolError
    return cls(result.message or result.error or "refused")


def remote_error(raw: bytes | str) -> OctosyncError | None:
    """The typed error an error frame names, or None if ``raw`` is not an error frame."""
    frame = decode_error_frame(raw)
    if frame is None:
        return None
    try:
        cls = by_name(frame.code)
    except KeyError:
        cls = ProtocolError
    return cls(frame.message, path=frame.path)


def _handshake(
    stream: str, *, publish: bool, max_frame: int, extra: tuple[str, ...] = ()
) -> Handshake:
    features = ["publish", *extra] if publish else [*extra]
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
    """A connection factory for one server URL (``ws://host:port``, or its ``/lazily`` URL)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        backoff: Backoff | None = None,
        max_frame_size: int = 1 << 20,
        seed: int | None = None,
        fallbacks: Sequence[str] = (),
        shared_blobs: bool = False,
        shm_threshold: int = 64 * 1024,
        shm_capacity: int = 256 * 1024 * 1024,
        on_retry: Callable[[int, int | None, BaseException], None] | None = None,
    ) -> None:
        """``shared_blobs``: negotiate ``shared-blob`` (same host only): payloads of
        ``shm_threshold`` bytes or more travel through POSIX shared memory, a region of
        ``shm_capacity`` bytes this client makes when it publishes, the server's when it
        subscribes; descriptors are checked before they are accepted."""
        self.url = lazily_url(url)
        self.urls = [self.url, *map(lazily_url, fallbacks)]
        """Where to connect, in turn: a reconnect that fails moves on to the next."""
        self._at = 0
        self.token = token
        self.backoff = backoff or Backoff()
        self.max_frame_size = max_frame_size
        self._rng = random.Random(seed)
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriptions: list[Subscription] = []
        self.shared_blobs = shared_blobs
        self.shm_threshold = shm_threshold
        self.shm_capacity = shm_capacity
        self._region: SharedRegion | None = None
        self._server_regions: dict[aiohttp.ClientWebSocketResponse, str] = {}
        self._server_features: dict[aiohttp.ClientWebSocketResponse, frozenset[str]] = {}
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
        if self._region is not None:
            self._region.close()
            self._region = None

    async def _open(self, stream: str, *, publish: bool) -> aiohttp.ClientWebSocketResponse:
        if self._http is None:
            raise RuntimeError("use 'async with connect(...)' first")
        ws = await connect_ws(self._http, self.urls[self._at], self.token, max_msg_size=0)
        hs = _handshake(
            stream, publish=publish, max_frame=self.max_frame_size, extra=self._features(publish)
        )
        await ws.send_bytes(wire_json.encode_handshake(hs))
        reply = await ws.receive()
        if reply.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            await ws.close()
            raise ConnectionError(f"connection closed during the handshake ({reply.type.name})")
        err = remote_error(reply.data)
        if err is not None:
            await ws.close()
            raise err
        agreed = wire_json.decode_handshake(reply.data)
        self._server_features[ws] = frozenset(agreed.features)
        for feature in agreed.features:
            if self.shared_blobs and feature.startswith(REGION_FEATURE):
                self._server_regions[ws] = feature[len(REGION_FEATURE) :]
        return ws

    def _features(self, publish: bool) -> tuple[str, ...]:
        ops = (REMOTE_OPS,) if publish else ()
        if not self.shared_blobs:
            return ops
        if not publish:
            return (SHARED_BLOB,)
        return (*ops, SHARED_BLOB, REGION_FEATURE + self._own_region().name)

    def _own_region(self) -> SharedRegion:
        if self._region is None:
            self._region = SharedRegion.create(fresh_name(), self.shm_capacity)
        return self._region

    def _encode_out(self, msg: Snapshot | Delta) -> bytes:
        """A producer's frame, its large payloads moved into shared memory if negotiated."""
        if self.shared_blobs:
            region = self._own_region()
            fits = region.arena.max_blob_len
            msg = spill_blobs(
                msg, lambda b: region.write(0, b) if len(b) <= fits else None, self.shm_threshold
            )
        return wire_json.encode(msg)

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
                    sub._remote_ops = REMOTE_OPS in self._server_features.pop(current, ())
                    try:
                        await self._pump(sub, current)
                    finally:
                        sub._ws = None
                        sub._fail_requests(ConnectionError("the connection was lost"))
        except OctosyncError as exc:  # refused (a token that expired, a revoked grant)
            sub._finish(exc)
        except BaseException as exc:  # cancelled by close() too: end the iteration
            sub._finish(exc)
            raise
        finally:
            sub._ws = None

    async def _pump(self, sub: Subscription, ws: aiohttp.ClientWebSocketResponse) -> None:
        name = self._server_regions.pop(ws, None)
        region = None if name is None else SharedRegion.open(name)
        try:
            await self._pump_into(sub, ws, Mirror(blobs=None if region is None else region.read))
        finally:
            if region is not None:
                region.close()

    async def _pump_into(
        self, sub: Subscription, ws: aiohttp.ClientWebSocketResponse, mirror: Mirror
    ) -> None:
        sub.mirror = mirror
        async for msg in ws:
            if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break
            err = remote_error(msg.data)
            if err is not None:
                sub.errors.append(err)
                continue
            decoded = wire_json.decode(msg.data)
            if isinstance(decoded, RemoteOpResult):
                sub._answered(decoded)
                continue
            result = mirror.apply(decoded)
            if isinstance(result, ResyncRequest):
                sub.resyncs += 1
                await ws.send_bytes(wire_json.encode(result))
                continue
            last = mirror.last_epoch
            if mirror.in_sync and last is not None and last != sub._last_yielded:
                sub._push(State(last, mirror.values(), mirror.names()))

    # --- publishing -----------------------------------------------------------------------

    async def publish(
        self,
        stream: str,
        ctx: Context,
        *,
        permissions: PeerPermissions | None = None,
        permissions_for: PermissionsFor | None = None,
    ) -> Publication:
        """Serve ``ctx`` as ``stream``: a snapshot now, then one delta per flush.

        Writers' requests are checked against ``permissions_for(writer)`` (who asked, as the
        server vouches), or ``permissions`` for everyone; each is answered, applied or refused
        with the typed error, to that writer alone."""
        ws = await self._open(stream, publish=True)
        pub = Publication(stream, ctx, permissions or PeerPermissions.allow_all(), permissions_for)
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
        replies: list[bytes] = []
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
                if isinstance(write, RemoteOp):
                    answer = pub.take(write)
                    if answer is not None:
                        replies.append(wire_json.encode(answer))
                        changed.set()
                elif isinstance(write, Delta):
                    try:
                        publisher.apply_remote(list(write.ops))
                    except OctosyncError as exc:
                        pub.errors.append(exc)

        read_task = asyncio.get_running_loop().create_task(reader())
        try:
            await ws.send_bytes(self._encode_out(publisher.snapshot()))
            publisher.drain()
            pub.started.set()
            while not ws.closed and not read_task.done():
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait({waiter, read_task}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                changed.clear()
                if publisher.lagged:
                    await ws.send_bytes(self._encode_out(publisher.snapshot()))
                    publisher.drain()
                    continue
                for d in publisher.drain():
                    await ws.send_bytes(self._encode_out(d))
                    pub.deltas_sent += 1
                while replies:  # after the deltas that carry what they applied
                    await ws.send_bytes(replies.pop(0))
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
    _remote_ops: bool = False
    _requests: dict[int, asyncio.Future[bool]] = field(default_factory=dict)
    _next_request: int = 0
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

    async def write(self, node: int | str, value: Any, *, timeout: float = 10.0) -> bool:
        """Ask the producer to set cell ``node`` (its id, or its name) to ``value``.

        Returns True once the producer applied it (the new value also comes back as an
        ordinary state), False when the producer only takes the older ``cell_set`` form, so
        only delivery is known. Raises the typed refusal (``Forbidden``: no write grant on
        the stream or the node, or the producer's permissions for this writer), or
        ``ConnectionError``: a write is never queued across a reconnect.
        """
        delta = self.mirror.write(node, value)
        op = delta.ops[0]
        assert isinstance(op, CellSet)
        assert isinstance(op.payload, bytes)
        if not self._remote_ops:  # a server without RemoteOp: the seed's cell_set write
            await self._connected().send_bytes(wire_json.encode(delta))
            return False
        return await self._ask(RemoteOp("write", op.slot_id, op.payload), timeout)

    async def trigger(self, effect: int, *, timeout: float = 10.0) -> bool:
        """Ask the producer to run effect ``effect`` (its node id: effects are not part of
        the published graph, so the producer shares the id). As ``write`` for the rest."""
        if not self._remote_ops:
            raise ProtocolError("this server does not relay effect requests", path="kind")
        return await self._ask(RemoteOp("trigger_effect", effect), timeout)

    def _connected(self) -> aiohttp.ClientWebSocketResponse:
        ws = self._ws
        if ws is None or ws.closed:
            raise ConnectionError(f"stream {self.stream!r} is not connected; request not sent")
        return ws

    async def _ask(self, op: RemoteOp, timeout: float) -> bool:
        ws = self._connected()
        self._next_request += 1
        request = self._next_request
        answer = asyncio.get_running_loop().create_future()
        self._requests[request] = answer
        try:
            await ws.send_bytes(wire_json.encode(msgspec.structs.replace(op, request=request)))
            return await asyncio.wait_for(answer, timeout)
        finally:
            self._requests.pop(request, None)

    def _answered(self, result: RemoteOpResult) -> None:
        answer = self._requests.get(result.request)
        if answer is None or answer.done():
            return
        if result.error is None:
            answer.set_result(result.applied)
        else:
            err = _error_from(result)
            self.errors.append(err)
            answer.set_exception(err)

    def _fail_requests(self, why: BaseException) -> None:
        for answer in self._requests.values():
            if not answer.done():
                answer.set_exception(why)

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
    permissions_for: PermissionsFor | None = None
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

    def take(self, op: RemoteOp) -> RemoteOpResult | None:
        """Apply a writer's request if its permissions allow; the answer to send back (None:
        nothing to say, an applied request that asked for no answer)."""
        writer = Writer(op.peer if op.peer is not None else 0, op.subject)
        perms = self.permissions if self.permissions_for is None else self.permissions_for(writer)
        try:
            if op.kind == "write":
                assert op.payload is not None  # RemoteOp checks it
                apply_remote_write(self.ctx, perms, CellSet(op.node, op.payload))
            else:
                trigger_remote_effect(self.ctx, perms, op.node)
        except OctosyncError as err:
            self.errors.append(err)
            return RemoteOpResult(op.request, op.peer, err.name, err.message[:1024])
        return RemoteOpResult(op.request, op.peer) if op.request else None

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


__all__ = [
    "Backoff",
    "Client",
    "PermissionsFor",
    "Publication",
    "State",
    "Subscription",
    "Writer",
    "connect",
    "remote_error",
]
