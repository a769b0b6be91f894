"""One WebSocket loop and one TCP loop for every face: they move bytes and enforce the envelope.

A face is a ``Session`` (bytes in, hub calls and error frames out); the hub decides the rest.
What every connection gets, whatever its face, lives here once:

- credentials checked at the HTTP upgrade, before any frame is read (401 without them);
- the frame limit (``Oversize``; the WebSocket reader itself refuses past twice the limit with
  close 1009), a handshake deadline, the token's expiry on open connections, and a per-
  connection input budget that slows a flooding peer down instead of letting it take the loop;
- large frames of faces with costly decoders are decoded on a worker thread;
- permessage-deflate, for the faces that fan large messages out (``deflate=True``): always
  answered with ``server_no_context_takeover``, so a message compressed once serves every
  connection that negotiated it (``ServedConnection.deflate``; ``wire.websocket.FrameDeflater``);
- a failure serving one connection reaches that connection only: a typed error frame, then the
  close code of ``hub.policy``; an unexpected exception becomes ``InternalError`` (close 1011)
  and is logged once per interval, never as a traceback per frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from aiohttp import WSMsgType, hdrs, web

from octosync.errors import (
    HandshakeFailed,
    InternalError,
    OctosyncError,
    ShuttingDown,
    Unauthorized,
)
from octosync.hub.limits import InputBudget
from octosync.hub.policy import close_code, closes_connection
from octosync.server.auth import ClaimGrants, authenticate, bearer_token
from octosync.server.face_names import FaceName
from octosync.server.flusher import writable
from octosync.server.guard import peer_address
from octosync.server.runtime import Runtime
from octosync.server.throttled_log import ThrottledLog
from octosync.wire.framing import FrameDecoder
from octosync.wire.websocket import DEFLATE_ANSWER, accepts_deflate

log = logging.getLogger("octosync.server")
_unexpected = ThrottledLog(log, interval=10.0)

RUNTIME = web.AppKey("runtime", Runtime)
M = TypeVar("M")


class Session(Protocol[M]):
    """One connection's protocol object for one face (see ``lazily_session.py`` and others),
    decoding its frames to messages of type ``M``."""

    face: FaceName
    """Counters key and metric label (``server.faces``)."""
    byte_stream: bool
    """Reads a continuous byte stream (framing is lost after a bad frame)."""
    offload_decode: bool
    """Its decoder is costly enough that large frames go to a worker thread."""

    @property
    def ready(self) -> bool:
        """The face's handshake is done (the deadline no longer applies)."""

    @property
    def identity(self) -> ClaimGrants | None:
        """Who the connection is, once known (at the upgrade, or a TCP handshake)."""

    @property
    def max_frame(self) -> int:
        """The frame limit in force now (negotiated by the handshake, never above the server's)."""

    @property
    def outgoing(self) -> list[bytes]:
        """Framed bytes for this connection that do not go through the hub (the loop writes
        and clears them after every frame): replies before the handshake registered it."""

    def decode(self, data: bytes) -> M:
        """What depends on the bytes alone; may run on a worker thread."""

    def handle(self, message: M) -> None:
        """Apply one decoded frame (hub calls); raises a typed error to refuse it."""

    def send_error(self, err: OctosyncError) -> None:
        """Queue an error frame for this connection (in its own dialect)."""

    def error_frame(self, err: OctosyncError) -> bytes:
        """The transport-framed bytes of an error frame (written directly when faulted)."""

    def close(self) -> None:
        """Leave the hub (and any rooms); called once when the connection ends."""


AnySession = Session[Any]
"""A session of any face (the loops only move its messages from ``decode`` to ``handle``)."""


def _messages(session: AnySession) -> int:
    """The messages the last frame carried: more than one for a frame that packs several
    (TopGun's ``BATCH``, whose session says ``messages_in_frame``), each charged to the
    frame budget, as TopGun's server charges each inner item to its rate limiter."""
    n = getattr(session, "messages_in_frame", 1)
    return n if isinstance(n, int) and n > 0 else 1


Closer = Callable[[int], Coroutine[Any, Any, object]]


class ServedConnection:
    """A live connection as the runtime sees it: its session, transport and how to close it."""

    def __init__(
        self,
        rt: Runtime,
        conn: int,
        session: AnySession,
        transport: asyncio.BaseTransport,
        closer: Closer,
    ) -> None:
        self.rt = rt
        self.conn = conn
        self.session = session
        self.transport = transport
        self.closer = closer
        self.close_code: int | None = None
        self._closing: asyncio.Task[object] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self.counters = rt.counters.faces[session.face]
        self.deflate = False
        """The peer takes compressed frames (``wire.websocket.DEFLATE_ANSWER`` negotiated)."""

    @property
    def session_face(self) -> FaceName:
        return self.session.face

    async def receive(self, data: bytes) -> bool:
        """Feed one frame; False when the connection must close."""
        counters = self.counters
        counters.frames_in += 1
        counters.bytes_in += len(data)
        session = self.session
        if self.rt.closing:
            return self.fail(ShuttingDown("the server is shutting down; reconnect later"))
        identity = session.identity
        if identity is not None and identity.expired(time.time()):
            return self.fail(Unauthorized("the token expired", path="exp"))
        try:
            self.rt.limits.check_frame_size(len(data))
            if session.offload_decode and len(data) >= self.rt.limits.offload_decode_bytes:
                message = await asyncio.to_thread(session.decode, data)
            else:
                message = session.decode(data)
            session.handle(message)
        except OctosyncError as err:
            return self.fail(err)
        except Exception as exc:
            _unexpected.exception(f"{session.face}: serving a frame failed", exc)
            return self.fail(InternalError(f"serving this frame failed: {type(exc).__name__}"))
        self._write_outgoing()
        if self._expiry is None and session.identity is not None:
            self._arm_expiry(session.identity)
        return True

    def greet(self) -> None:
        """Write what the session queued when it opened (TopGun's ``AUTH_REQUIRED``)."""
        self._write_outgoing()

    def _write_outgoing(self) -> None:
        out = self.session.outgoing
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            t = writable(self.transport)
            if t is not None:
                t.write(data)

    def fail(self, err: OctosyncError) -> bool:
        """Send ``err`` to this connection only; False when the policy says close."""
        self.counters.errors += 1
        self.session.send_error(err)
        self._write_outgoing()
        if not closes_connection(err, byte_stream=self.session.byte_stream):
            return True
        self.close_code = close_code(err)
        self.rt.flusher.flush_now(self.conn)
        return False

    def fault(self, err: OctosyncError) -> None:
        """Serving this connection failed outside its own frames (the flusher): reset it."""
        self.counters.errors += 1
        t = writable(self.transport)
        if t is not None:
            t.write(self.session.error_frame(err))
        self.close_soon(close_code(err))

    def close_soon(self, code: int) -> None:
        """Start closing from outside the read loop (expiry, fault, shutdown)."""
        if self._closing is None:
            self.close_code = self.close_code or code
            self._closing = asyncio.get_running_loop().create_task(self.closer(code))

    async def close(self, code: int) -> None:
        """Close and wait until the close frame is out (tests, administrative drops)."""
        self.close_soon(code)
        assert self._closing is not None
        await self._closing

    def abort(self) -> None:
        """Drop the connection now (a peer that stopped reading, at the shutdown deadline)."""
        t = self.transport
        if isinstance(t, asyncio.WriteTransport):
            t.abort()

    async def ended(self) -> None:
        """The read loop is over: wait (boundedly) for a close already under way."""
        if self._expiry is not None:
            self._expiry.cancel()
        if self._closing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._closing), self.rt.config.close_timeout)

    def _arm_expiry(self, identity: ClaimGrants) -> None:
        if identity.expires_at is None:
            return
        delay = max(0.0, identity.expires_at - time.time())
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expired)

    def _expired(self) -> None:
        if not self.fail(Unauthorized("the token expired", path="exp")):
            self.close_soon(self.close_code or close_code(Unauthorized("")))


def release(transport: asyncio.BaseTransport, timeout: float) -> None:
    """Close gracefully (what is buffered still goes out); abort if it cannot drain in time."""
    if not transport.is_closing():
        transport.close()
    if isinstance(transport, asyncio.WriteTransport) and transport.get_write_buffer_size():

        def abort_if_stuck() -> None:
            if transport.get_write_buffer_size():
                transport.abort()

        asyncio.get_running_loop().call_later(timeout, abort_if_stuck)


SessionFactory = Callable[[Runtime, int, ClaimGrants], AnySession]
"""A WebSocket face's session: the identity is known from the upgrade."""
TcpSessionFactory = Callable[[Runtime, int], AnySession]
"""A TCP face's session (or an in-band WebSocket face's): the identity comes with its
handshake frame."""


class StreamFramer(Protocol):
    """Splits a TCP byte stream into frames (``wire.framing.FrameDecoder``: u32 prefixes;
    ``wire.syndicate.PacketStream``: self-delimiting Preserves values)."""

    max_frame_size: int

    def feed(self, data: bytes) -> list[bytes]: ...


def refuse(status: int, err: OctosyncError) -> web.Response:
    """An HTTP refusal carrying the typed error (what a browser can read, unlike a close)."""
    return web.json_response({"code": err.name, "message": err.message}, status=status)


def request_identity(rt: Runtime, request: web.Request) -> ClaimGrants:
    """Who an HTTP request is (``?token=`` or ``Authorization: Bearer``), or ``Unauthorized``;
    counted as a refused upgrade when refused."""
    token = bearer_token(request.headers.get("Authorization"), request.query.get("token"))
    try:
        identity = authenticate(token, rt.config.auth)
        if identity.expired(time.time()):
            raise Unauthorized("the token expired", path="exp")
    except Unauthorized:
        rt.counters.refused_upgrades += 1
        raise
    return identity


async def serve_ws(
    request: web.Request, open_session: SessionFactory, *, deflate: bool = False
) -> web.StreamResponse:
    """The WebSocket loop of every face whose credentials come with the upgrade."""
    rt = request.app[RUNTIME]
    if rt.closing:
        return refuse(503, ShuttingDown("the server is shutting down; reconnect later"))
    try:
        identity = request_identity(rt, request)
    except Unauthorized as err:
        return refuse(401, err)
    return await _serve_ws(request, rt, lambda conn: open_session(rt, conn, identity), deflate)


async def serve_ws_in_band(
    request: web.Request, open_session: TcpSessionFactory, *, deflate: bool = False
) -> web.StreamResponse:
    """The same loop for a face that authenticates in its own first frames (TopGun's
    ``AUTH``): the upgrade is open to all, the handshake deadline bounds an idle socket, and
    the session refuses everything but its handshake until it knows who the peer is."""
    rt = request.app[RUNTIME]
    if rt.closing:
        return refuse(503, ShuttingDown("the server is shutting down; reconnect later"))
    return await _serve_ws(request, rt, lambda conn: open_session(rt, conn), deflate)


def _deflate_upgrade(request: web.Request, deflate: bool) -> tuple[web.Request, bool]:
    """The request aiohttp negotiates from, and whether deflate is on: a takeable offer is
    replaced by exactly what this server answers, so aiohttp's reader inflates what the client
    compresses and its answer names ``server_no_context_takeover`` whatever the client
    offered; otherwise the request as it came, and aiohttp (told not to compress) ignores
    any offer."""
    if not (deflate and accepts_deflate(request.headers.get(hdrs.SEC_WEBSOCKET_EXTENSIONS))):
        return request, False
    headers = request.headers.copy()
    headers[hdrs.SEC_WEBSOCKET_EXTENSIONS] = DEFLATE_ANSWER
    return request.clone(headers=headers), True


async def _serve_ws(
    request: web.Request, rt: Runtime, open_session: Callable[[int], AnySession], deflate: bool
) -> web.StreamResponse:
    limit = rt.limits.max_frame_bytes
    upgrade, deflate = _deflate_upgrade(request, deflate)
    # Pings are ours (``_pump_ws``), not aiohttp's: aiohttp 3.14 re-arms its heartbeat timer
    # when the peer's close reply arrives after ``close()``, and that timer keeps the whole
    # closed connection in memory for a further heartbeat period or more. (aiohttp itself
    # never compresses: the frames the server writes are framed by ``wire.websocket``.)
    ws = web.WebSocketResponse(max_msg_size=2 * limit + 1024, compress=deflate, autoping=False)
    await ws.prepare(upgrade)
    transport = request.transport
    assert transport is not None
    conn = rt.new_conn_id()

    async def closer(code: int) -> object:
        return await ws.close(code=code, message=b"")

    session = open_session(conn)
    link = ServedConnection(rt, conn, session, transport, closer)
    link.deflate = bool(ws.compress)
    rt.attach(conn, link)
    link.greet()
    try:
        await _pump_ws(rt, ws, link)
    finally:
        rt.detach(conn)
        session.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(code=link.close_code or 1000), rt.config.close_timeout)
        await link.ended()
        release(transport, rt.config.close_timeout)
    return ws


TURN = 0.002
"""Seconds one connection's frames may run back to back before the loop serves the others:
frames that arrive together are read without the loop ever waiting, so a client sending
thousands at once would otherwise hold every other connection for all of them."""


class _Turn:
    """Yield to the event loop once ``TURN`` seconds of one connection's work have passed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._since = loop.time()

    async def pass_on(self) -> None:
        if self._loop.time() - self._since > TURN:
            await asyncio.sleep(0)
            self._since = self._loop.time()


async def _pump_ws(rt: Runtime, ws: web.WebSocketResponse, link: ServedConnection) -> None:
    """Read frames into ``link`` until the peer closes or the policy does. A peer silent for
    ``heartbeat`` seconds is pinged, and dropped if it stays silent as long again."""
    loop = asyncio.get_running_loop()
    budget = InputBudget(rt.limits, loop.time())
    deadline = loop.time() + rt.config.handshake_timeout
    idle = rt.config.heartbeat or None
    pinged = False
    session = link.session
    turn = _Turn(loop)
    while True:
        timeout = idle if session.ready else max(0.0, deadline - loop.time())
        try:
            msg = await ws.receive(timeout=timeout)
        except TimeoutError:
            if not session.ready:
                link.fail(HandshakeFailed(f"no handshake within {rt.config.handshake_timeout} s"))
                return
            if pinged:
                link.abort()  # no answer to our ping: the peer is gone
                return
            pinged = True
            try:
                await ws.ping()
            except ConnectionError:
                return
            continue
        pinged = False  # anything the peer sends shows it is there
        if msg.type == WSMsgType.PING:
            await ws.pong(msg.data)
            continue
        if msg.type == WSMsgType.PONG:
            continue
        if msg.type == WSMsgType.BINARY:
            data: bytes = msg.data
        elif msg.type == WSMsgType.TEXT:
            data = msg.data.encode()
        else:
            return
        if not await link.receive(data):
            return
        wait = budget.charge(len(data), loop.time(), _messages(link.session))
        if wait > 0:
            await asyncio.sleep(wait)
        await turn.pass_on()


async def serve_tcp(
    rt: Runtime,
    open_session: TcpSessionFactory,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    framer: Callable[[int], StreamFramer] = FrameDecoder,
) -> None:
    """The plain-TCP loop (u32-framed unless ``framer`` says otherwise): credentials come
    with the handshake frame."""
    transport = writer.transport
    loop = asyncio.get_running_loop()
    conn = rt.new_conn_id()

    async def closer(code: int) -> object:
        writer.close()
        return None

    session = open_session(rt, conn)
    address = peer_address(transport)
    refused = rt.guard.admit(address)
    if refused is not None:
        transport.write(session.error_frame(refused))
        writer.close()
        return
    link = ServedConnection(rt, conn, session, transport, closer)
    rt.attach(conn, link)
    decoder = framer(rt.limits.max_preauth_frame_bytes)
    budget = InputBudget(rt.limits, loop.time())
    deadline = loop.time() + rt.config.handshake_timeout
    turn = _Turn(loop)
    try:
        while True:
            try:
                if session.ready:
                    chunk = await reader.read(65536)
                else:
                    chunk = await asyncio.wait_for(
                        reader.read(65536), max(0.0, deadline - loop.time())
                    )
            except TimeoutError:
                link.fail(HandshakeFailed(f"no handshake within {rt.config.handshake_timeout} s"))
                break
            except ConnectionError:
                break
            if not chunk:
                break
            try:
                frames = decoder.feed(chunk)
            except OctosyncError as err:
                link.fail(err)
                break  # the payload is never read: framing is lost, close
            if not await _receive_all(link, frames, decoder, turn):
                break
            wait = budget.charge(len(chunk), loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
    finally:
        rt.guard.release(address)
        rt.detach(conn)
        session.close()
        await link.ended()
        release(transport, rt.config.close_timeout)


async def _receive_all(
    link: ServedConnection, frames: list[bytes], decoder: StreamFramer, turn: _Turn
) -> bool:
    for frame in frames:
        if not await link.receive(frame):
            return False
        if link.session.ready:
            decoder.max_frame_size = link.session.max_frame
        await turn.pass_on()
    return True
