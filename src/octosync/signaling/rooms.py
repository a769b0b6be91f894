"""Signaling rooms (sans-I/O): join, directed relay with a server-stamped ``from``, leave.

The relay never trusts a client's idea of who it is: ``from`` on every forwarded frame is the
peer id the sending connection registered with ``join``, and nothing is relayed before that.
Who may join which room comes from the connection's credentials (``JoinRights``); in allowlist
mode the peer id is bound to them too, so one user cannot join as another's allowlisted peer.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal, Protocol

from octosync.errors import DuplicatePeer, Forbidden, NotJoined, UnknownTarget
from octosync.signaling.messages import (
    Answer,
    AnswerFrom,
    ClientSignal,
    Ice,
    IceFrom,
    Join,
    Leave,
    Offer,
    OfferFrom,
    PeerJoined,
    PeerLeft,
    Relay,
    RelayFrom,
    ServerSignal,
    Welcome,
)


class JoinRights(Protocol):
    """What a connection's credentials say about joining (``server.auth.ClaimGrants``)."""

    @property
    def peer(self) -> int | None: ...

    @property
    def everything(self) -> bool: ...

    def may_join(self, room: str) -> bool: ...


class AnyRights:
    """Rights that allow every join as any peer (in-process use and tests)."""

    peer: int | None = None
    everything = True

    def may_join(self, room: str) -> bool:
        return True


ANY_RIGHTS = AnyRights()

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

    def handle(
        self, conn: int, session: str, msg: ClientSignal, rights: JoinRights = ANY_RIGHTS
    ) -> Out:
        """Apply one client frame; raises a typed error (and changes nothing) if refused."""
        if isinstance(msg, Join):
            return self._join(conn, session, msg, rights)
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

    def _join(self, conn: int, session: str, msg: Join, rights: JoinRights) -> Out:
        if conn in self._joined:
            raise DuplicatePeer("this connection has already joined", path="peer")
        if not rights.may_join(session):
            raise Forbidden(f"not granted join on room {session!r}", path="session")
        if self.policy.mode == "allowlist" and not rights.everything and rights.peer != msg.peer:
            bound = "no peer id" if rights.peer is None else f"peer {rights.peer}"
            raise Forbidden(f"the credentials bind {bound}, not peer {msg.peer}", path="peer")
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
