"""The ``/signal`` face's state: its rooms (``signaling.SignalingHub``), made per server; the
signal sessions' port (``server.ports.SignalPort``)."""

from __future__ import annotations

from octosync.server.face_names import FaceName
from octosync.server.runtime import Runtime
from octosync.server.served_state import ServedFaceState
from octosync.signaling import SignalingHub


class SignalState(ServedFaceState):
    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt)
        self.signaling = SignalingHub(rt.config.signaling)


def signal_state(rt: Runtime) -> SignalState:
    return rt.face_state(FaceName.SIGNAL, SignalState)
