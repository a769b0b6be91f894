"""The WVP face's protocol object: JS-ABI packets of canonical CBOR, one per binary message.

The identity comes from the HTTP upgrade, so nothing is decoded for a connection without one.
Decoding a large packet is costly (canonical CBOR is re-encoded to be checked), so the
connection loop runs ``decode`` on a worker thread for large frames; ``handle`` then makes the
hub calls on the event loop, in order. Notifications need ``publish`` on their scope: the warp's
stream for ``{Warp: id}``, the explicit pseudo-stream ``$global`` for every other scope.
"""

from __future__ import annotations

import asyncio

from octosync.errors import DecodeError, Forbidden, HandshakeFailed, OctosyncError
from octosync.hub import SnapshotFrame, ViewKey
from octosync.hub.model import DiffFrame
from octosync.hub.streams import warp_stream_id
from octosync.server.auth import GLOBAL_SCOPE, ClaimGrants
from octosync.server.runtime import Runtime
from octosync.wire import jsabi, wvp
from octosync.wire.websocket import ws_frame

SERVER_VERSION = 1
VIEW = ViewKey("wvp/ws")


class WvpSession:
    face = "wvp"
    byte_stream = False
    offload_decode = True

    def __init__(
        self, rt: Runtime, conn: int, transport: asyncio.BaseTransport, identity: ClaimGrants
    ) -> None:
        self.rt = rt
        self.conn = conn
        self.transport = transport
        self.identity = identity
        self.ready = False
        self.max_frame = rt.limits.max_frame_bytes

    def decode(self, data: bytes) -> object:
        if len(data) >= jsabi.HEADER_SIZE:
            jsabi.check_header(data[: jsabi.HEADER_SIZE])  # Oversize before the payload
        return wvp.decode(data, opaque=True)[0]

    def error_frame(self, err: OctosyncError) -> bytes:
        return self._frame(_error_payload(err))

    def send_error(self, err: OctosyncError) -> None:
        self._send(_error_payload(err))

    def close(self) -> None:
        self.rt.hub.disconnect(self.conn)

    def _frame(self, msg: wvp.Message) -> bytes:
        return ws_frame(wvp.encode(msg, self.rt.hub.next_ts()), text=False)

    def _send(self, msg: wvp.Message) -> None:
        data = self._frame(msg)
        if self.ready:
            self.rt.hub.send_control(self.conn, data)
        elif isinstance(self.transport, asyncio.WriteTransport) and not self.transport.is_closing():
            self.transport.write(data)

    def handle(self, message: object) -> None:
        hub = self.rt.hub
        if not self.ready:
            if not isinstance(message, wvp.Handshake):
                raise HandshakeFailed("the first message must be a handshake", path="op")
            hub.connect(self.conn, VIEW, grants=self.identity, wake=self.rt.flusher.wake)
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
        match message:
            case wvp.SubscribeWarp(warp_id=wid):
                hub.subscribe(self.conn, warp_stream_id(wid))
            case wvp.WarpStream(warp_id=wid, frame=wvp.WarpSnapshot() as snap):
                hub.publish(
                    self.conn, warp_stream_id(wid), SnapshotFrame(snap.epoch, snap, snap.state_hash)
                )
            case wvp.WarpStream(warp_id=wid, frame=wvp.WarpDiff() as diff):
                self._publish_diff(wid, diff)
            case wvp.Notification(scope=scope):
                self._notify(message, scope)
            case wvp.HandshakeAck() | wvp.ErrorPayload() | wvp.Handshake():
                raise DecodeError(f"{wvp.OPS[type(message)]} is not sent by clients", path="op")

    def _publish_diff(self, wid: int, diff: wvp.WarpDiff) -> None:
        hub = self.rt.hub
        stream = warp_stream_id(wid)
        wanted = hub.needs_snapshot(stream)
        hub.publish(
            self.conn, stream, DiffFrame(diff.from_epoch, diff.to_epoch, diff, diff.state_hash)
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

    def _notify(self, note: wvp.Notification, scope: object) -> None:
        hub = self.rt.hub
        if isinstance(scope, dict) and "Warp" in scope:
            stream = warp_stream_id(scope["Warp"])
            if not self.identity.allows(stream, "publish"):
                raise Forbidden(f"not granted publish on stream {stream!r}", path="scope")
            targets = hub.subscribers_of(stream)
        else:
            if not self.identity.allows(GLOBAL_SCOPE, "publish"):
                raise Forbidden(
                    f"a {scope!r} notification needs publish on {GLOBAL_SCOPE!r}", path="scope"
                )
            targets = hub.connections_with_encoder(VIEW.encoder)
        data = self._frame(note)
        for conn in targets:
            if conn != self.conn:
                hub.send_control(conn, data)


def _error_payload(err: OctosyncError) -> wvp.ErrorPayload:
    details = None if err.path is None else {"path": err.path}
    return wvp.ErrorPayload(code=err.code, name=err.name, message=err.message, details=details)
