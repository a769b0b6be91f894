"""The WVP face's protocol object: JS-ABI packets of canonical CBOR, one per binary message.

The identity comes from the HTTP upgrade, so nothing is decoded for a connection without one.
Decoding a large packet costs a walk of its canonical CBOR, so the connection loop runs
``decode`` on a worker thread for large frames (graphs and ops stay raw bytes, never Python
objects); ``handle`` then makes the hub calls on the event loop, in order. Notifications are
relayed by the hub, which checks the grant (``Hub.notify``).
"""

from __future__ import annotations

from enum import Enum

from octosync.errors import DecodeError, HandshakeFailed, OctosyncError
from octosync.hub import SnapshotFrame, ViewKey
from octosync.hub.model import DiffFrame
from octosync.hub.streams import warp_id_of, warp_stream_id
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.lifecycle import Lifecycle
from octosync.server.runtime import Runtime
from octosync.server.view_encoders import WVP_VIEW
from octosync.wire import jsabi, wvp
from octosync.wire.websocket import ws_frame

SERVER_VERSION = 1
DURABLE_ACK = "durable_ack"
"""A producer that offers this capability gets ``durable_ack {warp_id, through_epoch}`` once
its frames through that epoch are committed to the journal."""
VIEW = ViewKey("wvp", WVP_VIEW)


class State(Enum):
    AWAIT_HANDSHAKE = 1
    OPEN = 2
    CLOSED = 3


LIFECYCLE: dict[tuple[State, str], State] = {
    (State.AWAIT_HANDSHAKE, "handshake"): State.OPEN,
    (State.AWAIT_HANDSHAKE, "close"): State.CLOSED,
    (State.OPEN, "close"): State.CLOSED,
}


class WvpSession:
    face = FaceName.WVP
    byte_stream = False
    offload_decode = True

    def __init__(self, rt: Runtime, conn: int, identity: ClaimGrants) -> None:
        self.rt = rt
        self.conn = conn
        self.identity = identity
        self.life = Lifecycle(LIFECYCLE, State.AWAIT_HANDSHAKE)
        self.max_frame = rt.limits.max_frame_bytes
        self.outgoing: list[bytes] = []

    @property
    def ready(self) -> bool:
        return self.life.state is State.OPEN

    def decode(self, data: bytes) -> object:
        if len(data) >= jsabi.HEADER_SIZE:
            jsabi.check_header(data[: jsabi.HEADER_SIZE])  # Oversize before the payload
        return wvp.decode(data, opaque=True)[0]

    def error_frame(self, err: OctosyncError) -> bytes:
        details = None if err.path is None else {"path": err.path}
        payload = wvp.ErrorPayload(
            code=err.code, name=err.name, message=err.message, details=details
        )
        return self._frame(payload)

    def send_error(self, err: OctosyncError) -> None:
        self._send(self.error_frame(err))

    def close(self) -> None:
        self.life.move("close")
        self.rt.durable_listeners.pop(self.conn, None)
        self.rt.hub.disconnect(self.conn)

    def _durable(self, stream: object, epoch: int) -> None:
        """The journal holds this producer's warp through ``epoch``."""
        ack = wvp.DurableAck(warp_id=warp_id_of(stream), through_epoch=epoch)
        self.rt.hub.send_control(self.conn, self._frame(ack))

    def _frame(self, msg: wvp.Message) -> bytes:
        return ws_frame(wvp.encode(msg, self.rt.hub.next_ts()), text=False)

    def _send(self, data: bytes) -> None:
        if self.ready:
            self.rt.hub.send_control(self.conn, data)
        else:
            self.outgoing.append(data)

    def handle(self, message: object) -> None:
        hub = self.rt.hub
        if self.life.state is State.AWAIT_HANDSHAKE:
            if not isinstance(message, wvp.Handshake):
                raise HandshakeFailed("the first message must be a handshake", path="op")
            hub.connect(self.conn, VIEW, grants=self.identity, wake=self.rt.flusher.wake)
            self.life.move("handshake")
            if DURABLE_ACK in message.capabilities and self.rt.writer is not None:
                self.rt.durable_listeners[self.conn] = self._durable
            ack = wvp.HandshakeAck(
                status="OK",
                server_version=SERVER_VERSION,
                capabilities=("subscribe_warp", "warp_stream", "notification", DURABLE_ACK),
                session_id=f"conn-{self.conn}",
            )
            self._send(self._frame(ack))
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
                warp = scope.get("Warp") if isinstance(scope, dict) else None
                stream = None if warp is None else warp_stream_id(warp)
                hub.notify(self.conn, stream, self._frame(message))
            case wvp.HandshakeAck() | wvp.ErrorPayload() | wvp.Handshake() | wvp.DurableAck():
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
            note = wvp.Notification(
                kind="Warn",
                scope={"Warp": wid},
                title="snapshot requested",
                body="the hub's replay log is full; send a Snapshot",
            )
            self._send(self._frame(note))
