"""WebRTC-style signaling rooms: messages and their codec, and the sans-I/O relay rules."""

from octosync.signaling.messages import (
    SIGNAL_ERROR_CODES,
    ClientSignal,
    ServerSignal,
    SignalError,
)
from octosync.signaling.rooms import ANY_RIGHTS, JoinRights, SignalingHub, SignalingPolicy

__all__ = [
    "ANY_RIGHTS",
    "SIGNAL_ERROR_CODES",
    "ClientSignal",
    "JoinRights",
    "ServerSignal",
    "SignalError",
    "SignalingHub",
    "SignalingPolicy",
]
