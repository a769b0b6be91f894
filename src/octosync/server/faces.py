"""The wire faces: ``/lazily`` and ``/wvp`` and ``/signal`` over WebSocket, lazily over TCP.

Faces translate bytes to hub calls and hub errors to error frames; the hub decides. Every
connection's errors go to that connection only, and a face never awaits another connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

import msgspec
from aiohttp import WSMsgType, web

from octosync.errors import (
    DecodeError,
    HandshakeFailed,
    OctosyncError,
    Oversize,
    Unauthorized,
)
from octosync.hub import SnapshotFrame, ViewKey, closes_connection
from octosync.hub.model import DiffFrame
from octosync.hub.signaling import (
    SIGNAL_ERROR_CODES,
    ClientSignal,
    ServerSignal,
    SignalError,
)
from octosync.server.auth import authenticate
from octosync.server.framing import ws_frame
from octosync.server.lazily_session import LazilySession, header_token
from octosync.server.runtime import Runtime, warp_stream_id
from octosync.wire import jsabi, wvp

RUNTIME = web.AppKey("runtime", Runtime)
SERVER_VERSION = 1


def _token(request: web.Request) -> str | None:
    return header_token(request.headers.get("Authorization"), request.query.get("token"))


async def _open_ws(request: web.Request, max_msg: int) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=max_msg, compress=False, autoping=True)
    await ws.prepare(request)
    return ws


# --- /lazily -----------------------------------------------------------------------------


async def lazily_handler(request: web.Request) -> web.WebSocketResponse:
    rt = request.app[RUNTIME]
    limit = rt.config.max_frame_size
    ws = await _open_ws(request, max_msg=2 * limit + 1024)
    transport = request.transport
    assert transport is not None
    conn = rt.new_conn_id()
    counters = rt.counters.faces["lazily"]
    counters.connections += 1
    session = LazilySession(rt, conn, transport, "ws", _token(request))
    rt.flusher.attach(conn, transport)
    rt.closers[conn] = lambda: ws.close(code=1001, message=b"server shutting down")
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = msg.data.encode()
            elif msg.type == WSMsgType.BINARY:
                data = msg.data
            else:
                break
            if len(data) > session.max_frame:
                session.fail(Oversize(f"frame of {len(data)} bytes exceeds {session.max_frame}"))
                break
            if not session.handle(data):
                break
    finally:
        counters.connections -= 1
        rt.closers.pop(conn, None)
        session.close()
        await ws.close()
    return ws


# --- lazily over TCP ---------------------------------------------------------------------

_U32 = struct.Struct(">I")


async def tcp_handler(
    rt: Runtime, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    conn = rt.new_conn_id()
    counters = rt.counters.faces["tcp"]
    counters.connections += 1
    transport = writer.transport
    session = LazilySession(rt, conn, transport, "tcp", None)
    rt.flusher.attach(conn, transport)

    async def closer() -> None:
        writer.close()

    rt.closers[conn] = closer
    try:
        while True:
            try:
                head = await reader.readexactly(4)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            (length,) = _U32.unpack(head)
            if length > session.max_frame:
                session.fail(Oversize(f"frame length {length} exceeds {session.max_frame}"))
                break  # the payload is never read: framing is lost, close
            try:
                data = await reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if not session.handle(data):
                break
    finally:
        counters.connections -= 1
        rt.closers.pop(conn, None)
        session.close()
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


# --- /wvp --------------------------------------------------------------------------------


class _WvpSession:
    def __init__(self, rt: Runtime, conn: int, transport: asyncio.BaseTransport, token: str | None):
        self.rt = rt
        self.conn = conn
        self.transport = transport
        self.token = token
        self.ready = False

    def _send(self, msg: wvp.Message) -> None:
        data = ws_frame(wvp.encode(msg, self.rt.hub.next_ts()), text=False)
        if self.ready:
            self.rt.hub.send_control(self.conn, data)
        elif isinstance(self.transport, asyncio.WriteTransport) and not self.transport.is_closing():
            self.transport.write(data)

    def fail(self, err: OctosyncError) -> bool:
        self.rt.counters.faces["wvp"].errors += 1
        details = None if err.path is None else {"path": err.path}
        self._send(wvp.ErrorPayload(err.code, err.name, err.message, details))
        close = closes_connection(err, byte_stream=False)
        if close:
            self.rt.flusher.flush_now(self.conn)
        return not close

    def handle(self, data: bytes) -> bool:
        counters = self.rt.counters.faces["wvp"]
        counters.frames_in += 1
        counters.bytes_in += len(data)
        try:
            self._handle(data)
        except OctosyncError as err:
            return self.fail(err)
        return True

    def _handle(self, data: bytes) -> None:
        if len(data) >= jsabi.HEADER_SIZE:
            jsabi.check_header(data[: jsabi.HEADER_SIZE])  # Oversize before the payload
        msg, _ts = wvp.decode(data)
        hub = self.rt.hub
        if not self.ready:
            if not isinstance(msg, wvp.Handshake):
                raise HandshakeFailed("the first message must be a handshake", path="op")
            grants = authenticate(self.token, self.rt.config.auth)
            hub.connect(self.conn, ViewKey("wvp/ws"), grants=grants, wake=self.rt.flusher.wake)
            self.ready = True
            self._send(
                wvp.HandshakeAck(
                    status="OK",
                    server_version=SERVER_VERSION,
                    capabilities=("subscribe_warp", "warp_stream", "notification"),
                    session_id=f"conn-{self.conn}",
                )
            )
            return
        match msg:
            case wvp.SubscribeWarp(warp_id=wid):
                hub.subscribe(self.conn, warp_stream_id(wid))
            case wvp.WarpStream(warp_id=wid, frame=wvp.WarpSnapshot() as snap):
                hub.publish(
                    self.conn, warp_stream_id(wid), SnapshotFrame(snap.epoch, snap, snap.state_hash)
                )
            case wvp.WarpStream(warp_id=wid, frame=wvp.WarpDiff() as diff):
                stream = warp_stream_id(wid)
                wanted = hub.needs_snapshot(stream)
                hub.publish(
                    self.conn,
                    stream,
                    DiffFrame(diff.from_epoch, diff.to_epoch, diff, diff.state_hash),
                )
                if hub.needs_snapshot(stream) and not wanted:
                    # The replay log is full: late joiners wait until the producer re-snapshots.
                    self._send(
                        wvp.Notification(
                            kind="Warn",
                            scope={"Warp": wid},
                            title="snapshot requested",
                            body="the hub's replay log is full; send a Snapshot",
                        )
                    )
            case wvp.Notification(scope=scope):
                self._notify(msg, scope)
            case _:
                raise DecodeError(f"{wvp.OPS[type(msg)]} is not sent by clients", path="op")

    def _notify(self, note: wvp.Notification, scope: object) -> None:
        hub = self.rt.hub
        data = ws_frame(wvp.encode(note, hub.next_ts()), text=False)
        if isinstance(scope, dict) and "Warp" in scope:
            targets = hub.subscribers_of(warp_stream_id(scope["Warp"]))
        else:
            targets = hub.connections_with_dialect("wvp/ws")
        for conn in targets:
            if conn != self.conn:
                hub.send_control(conn, data)

    def close(self) -> None:
        self.rt.hub.disconnect(self.conn)
        self.rt.flusher.detach(self.conn)


async def wvp_handler(request: web.Request) -> web.WebSocketResponse:
    rt = request.app[RUNTIME]
    overhead = jsabi.HEADER_SIZE + jsabi.CHECKSUM_SIZE
    ws = await _open_ws(request, max_msg=2 * (jsabi.MAX_PAYLOAD + overhead))
    transport = request.transport
    assert transport is not None
    conn = rt.new_conn_id()
    counters = rt.counters.faces["wvp"]
    counters.connections += 1
    session = _WvpSession(rt, conn, transport, _token(request))
    rt.flusher.attach(conn, transport)
    rt.closers[conn] = lambda: ws.close(code=1001, message=b"server shutting down")
    try:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                ok = session.handle(msg.data)
            elif msg.type == WSMsgType.TEXT:
                ok = session.fail(DecodeError("WVP packets travel in binary frames", path="$"))
            else:
                break
            if not ok:
                break
    finally:
        counters.connections -= 1
        rt.closers.pop(conn, None)
        session.close()
        await ws.close()
    return ws


# --- /signal -----------------------------------------------------------------------------

_signal_decoder = msgspec.json.Decoder(ClientSignal)
_signal_encoder = msgspec.json.Encoder()


async def signal_handler(request: web.Request) -> web.WebSocketResponse:
    rt = request.app[RUNTIME]
    ws = await _open_ws(request, max_msg=1024 * 1024)
    transport = request.transport
    assert transport is not None
    conn = rt.new_conn_id()
    session = request.query.get("session", "default")
    counters = rt.counters.faces["signal"]
    counters.connections += 1
    transports: dict[int, asyncio.BaseTransport] = rt.signal_transports
    transports[conn] = transport

    def send(target: int, frame: ServerSignal) -> None:
        t = transports.get(target)
        if isinstance(t, asyncio.WriteTransport) and not t.is_closing():
            if t.get_write_buffer_size() > rt.config.socket_high_water:
                t.close()  # a signaling peer that cannot keep up is dropped, not waited for
                return
            t.write(ws_frame(_signal_encoder.encode(frame), text=True))

    def error(err: OctosyncError) -> None:
        counters.errors += 1
        code = SIGNAL_ERROR_CODES.get(err.name, err.name)
        # The spec's error frame is exactly {type, code, message}: the bare text, no path.
        send(conn, SignalError(code=code, message=err.message))

    rt.closers[conn] = lambda: ws.close(code=1001, message=b"server shutting down")
    try:
        try:
            authenticate(_token(request), rt.config.auth)
        except Unauthorized as err:
            error(err)
            return ws
        async for msg in ws:
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            counters.frames_in += 1
            counters.bytes_in += len(msg.data)
            try:
                try:
                    frame = _signal_decoder.decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise DecodeError(str(exc)) from exc
                for target, out in rt.signaling.handle(conn, session, frame):
                    send(target, out)
            except OctosyncError as err:
                error(err)
    finally:
        counters.connections -= 1
        rt.closers.pop(conn, None)
        for target, out in rt.signaling.leave(conn):
            send(target, out)
        transports.pop(conn, None)
        await ws.close()
    return ws
