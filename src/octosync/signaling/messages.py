"""Signaling messages and their strict JSON codec (the one place signaling frames are decoded).

Client frames carry ``type`` and, when directed, ``to``; the server stamps ``from`` itself.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

PeerId = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]


class _Sig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type"):
    pass


# client -> server
class Join(_Sig, frozen=True, tag="join", omit_defaults=True):
    peer: PeerId
    capabilities: tuple[str, ...] | None = None


class Offer(_Sig, frozen=True, tag="offer"):
    to: PeerId
    sdp: str


class Answer(_Sig, frozen=True, tag="answer"):
    to: PeerId
    sdp: str


class Ice(_Sig, frozen=True, tag="ice"):
    to: PeerId
    candidate: str


class Relay(_Sig, frozen=True, tag="relay"):
    to: PeerId
    payload: Any


class Leave(_Sig, frozen=True, tag="leave"):
    pass


ClientSignal = Join | Offer | Answer | Ice | Relay | Leave


# server -> client
class Welcome(_Sig, frozen=True, tag="welcome"):
    peer: PeerId
    peers: tuple[PeerId, ...]


class PeerJoined(_Sig, frozen=True, tag="peer-joined"):
    peer: PeerId


class PeerLeft(_Sig, frozen=True, tag="peer-left"):
    peer: PeerId


class OfferFrom(_Sig, frozen=True, tag="offer"):
    from_: PeerId = msgspec.field(name="from")
    sdp: str


class AnswerFrom(_Sig, frozen=True, tag="answer"):
    from_: PeerId = msgspec.field(name="from")
    sdp: str


class IceFrom(_Sig, frozen=True, tag="ice"):
    from_: PeerId = msgspec.field(name="from")
    candidate: str


class RelayFrom(_Sig, frozen=True, tag="relay"):
    from_: PeerId = msgspec.field(name="from")
    payload: Any


class SignalError(_Sig, frozen=True, tag="error"):
    code: str
    message: str


ServerSignal = (
    Welcome | PeerJoined | PeerLeft | OfferFrom | AnswerFrom | IceFrom | RelayFrom | SignalError
)

SIGNAL_ERROR_CODES = {
    "Forbidden": "permission_denied",
    "UnknownTarget": "unknown_target",
    "NotJoined": "not_joined",
    "DuplicatePeer": "duplicate_peer",
    "DecodeError": "decode_error",
}
"""The seed's snake_case signaling codes for the errors.py names."""
