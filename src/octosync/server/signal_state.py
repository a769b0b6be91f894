"""The ``/signal`` face's state: its rooms (``signaling.SignalingHub``), made per server; the
signal sessions' port (``server.ports.SignalPort``)."""

from __future__ import annotations

from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.face_state import FaceState
from octosync.server.runtime import Runtime
from octosync.signaling import SignalingHub


class SignalState(FaceState):
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.signaling = SignalingHub(rt.config.signaling)

    @property
    def max_frame(self) -> int:
        return self.rt.max_frame

    def authenticate(self, token: str | None) -> ClaimGrants:
        return self.rt.authenticate(token)

    def deliver(self, conn: int, *data: bytes) -> None:
        self.rt.deliver(conn, *data)


def signal_state(rt: Runtime) -> SignalState:
    return rt.face_state(FaceName.SIGNAL, SignalState)
