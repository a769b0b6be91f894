"""Signaling rooms (sans-I/O): join, directed relay with a server-stamped ``from``, leave.

The relay never trusts a client's idea of who it is: ``from`` on every forwarded frame is the
peer id the sending connection registered with ``join``, and nothing is relayed before that.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec

from octosync.errors import DuplicatePeer, Forbidden, NotJoined, UnknownTarget

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

Mode = Literal["open", "allowlist"]
Out = list[tuple[int, ServerSignal]]
"""(connection id, frame) pairs for the face to send."""


@dataclass(slots=True)
class SignalingPolicy:
    """``open``: anyone joins and signals anyone. ``allowlist``: default deny.

    In allowlist mode ``grants[peer]`` is the set of peers ``peer`` may send directed frames
    to; a peer absent from ``grants`` may not join at all.
    """

    mode: Mode = "open"
    grants: Mapping[int, Set[int]] = field(default_factory=dict)

    def may_join(self, peer: int) -> bool:
        return self.mode == "open" or peer in self.grants

    def may_signal(self, sender: int, target: int) -> bool:
        return self.mode == "open" or target in self.grants.get(sender, frozenset())


@dataclass(slots=True)
class _Room:
    peers: dict[int, int] = field(default_factory=dict)  # peer id -> connection id


class SignalingHub:
    def __init__(self, policy: SignalingPolicy | None = None) -> None:
        self.policy = policy or SignalingPolicy()
        self._rooms: dict[str, _Room] = {}
        self._joined: dict[int, tuple[str, int]] = {}  # connection -> (session, peer)

    def peer_of(self, conn: int) -> int | None:
        entry = self._joined.get(conn)
        return None if entry is None else entry[1]

    def roster(self, session: str) -> list[int]:
        room = self._rooms.get(session)
        return [] if room is None else sorted(room.peers)

    def handle(self, conn: int, session: str, msg: ClientSignal) -> Out:
        """Apply one client frame; raises a typed error (and changes nothing) if refused."""
        if isinstance(msg, Join):
            return self._join(conn, session, msg)
        entry = self._joined.get(conn)
        if entry is None:
            raise NotJoined(f"{type(msg).__name__.lower()} before join", path="type")
        room_name, sender = entry
        if isinstance(msg, Leave):
            return self.leave(conn)
        room = self._rooms[room_name]
        target_conn = room.peers.get(msg.to)
        if target_conn is None:
            raise UnknownTarget(f"peer {msg.to} is not in this session", path="to")
        if not self.policy.may_signal(sender, msg.to):
            raise Forbidden(f"peer {sender} is not allowed to signal peer {msg.to}", path="to")
        out: ServerSignal
        match msg:
            case Offer(sdp=sdp):
                out = OfferFrom(from_=sender, sdp=sdp)
            case Answer(sdp=sdp):
                out = AnswerFrom(from_=sender, sdp=sdp)
            case Ice(candidate=cand):
                out = IceFrom(from_=sender, candidate=cand)
            case Relay(payload=payload):
                out = RelayFrom(from_=sender, payload=payload)
        return [(target_conn, out)]

    def _join(self, conn: int, session: str, msg: Join) -> Out:
        if conn in self._joined:
            raise DuplicatePeer("this connection has already joined", path="peer")
        room = self._rooms.setdefault(session, _Room())
        if msg.peer in room.peers:
            if not room.peers:
                self._rooms.pop(session, None)
            raise DuplicatePeer(f"peer {msg.peer} is already in this session", path="peer")
        if not self.policy.may_join(msg.peer):
            if not room.peers:
                self._rooms.pop(session, None)
            raise Forbidden(f"peer {msg.peer} is not allowed to join", path="peer")
        others = sorted(room.peers)
        out: Out = [(conn, Welcome(peer=msg.peer, peers=tuple(others)))]
        out.extend((room.peers[p], PeerJoined(peer=msg.peer)) for p in others)
        room.peers[msg.peer] = conn
        self._joined[conn] = (session, msg.peer)
        return out

    def leave(self, conn: int) -> Out:
        """The connection left (``leave`` frame or disconnect); others hear ``peer-left``."""
        entry = self._joined.pop(conn, None)
        if entry is None:
            return []
        session, peer = entry
        room = self._rooms[session]
        del room.peers[peer]
        if not room.peers:
            del self._rooms[session]
        return [(c, PeerLeft(peer=peer)) for c in room.peers.values()]
