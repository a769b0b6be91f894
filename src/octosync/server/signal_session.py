"""The signaling face's protocol object: JSON frames relayed between the peers of one room.

The room is the upgrade's ``?session=`` (default ``default``); joining it needs the ``join``
grant on it, and in allowlist mode the peer id the credentials bind (``signaling.rooms``).
Frames for other peers go through ``Runtime.deliver``: a peer that cannot keep up is dropped,
never waited for.
"""

from __future__ import annotations

from octosync.errors import OctosyncError
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.runtime import Runtime
from octosync.signaling import (
    SIGNAL_ERROR_CODES,
    ServerSignal,
    SignalError,
    decode_client,
    encode_server,
)
from octosync.signaling.messages import ClientSignal
from octosync.wire.websocket import ws_frame


class SignalSession:
    face = FaceName.SIGNAL
    byte_stream = False
    offload_decode = False
    ready = True
    """Signaling has no handshake of its own: ``join`` is an ordinary frame."""

    def __init__(self, rt: Runtime, conn: int, identity: ClaimGrants, room: str) -> None:
        self.rt = rt
        self.conn = conn
        self.identity = identity
        self.room = room
        self.max_frame = rt.limits.max_frame_bytes
        self.outgoing: list[bytes] = []

    def decode(self, data: bytes) -> object:
        return decode_client(data)

    def handle(self, message: object) -> None:
        assert isinstance(message, ClientSignal)
        for target, out in self.rt.signaling.handle(self.conn, self.room, message, self.identity):
            self._send(target, out)

    def error_frame(self, err: OctosyncError) -> bytes:
        code = SIGNAL_ERROR_CODES.get(err.name, err.name)
        return ws_frame(encode_server(SignalError(code=code, message=err.message)), text=True)

    def send_error(self, err: OctosyncError) -> None:
        self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        for target, out in self.rt.signaling.leave(self.conn):
            self._send(target, out)

    def _send(self, target: int, frame: ServerSignal) -> None:
        data = ws_frame(encode_server(frame), text=True)
        if target == self.conn:
            self.outgoing.append(data)
        else:
            self.rt.deliver(target, data)
