"""Random joins, leaves, disconnects and directed frames across two signaling sessions."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.errors import DuplicatePeer, Forbidden, NotJoined, UnknownTarget
from octosync.signaling.messages import (
    Join,
    Leave,
    Offer,
    OfferFrom,
    PeerJoined,
    PeerLeft,
    Relay,
    RelayFrom,
    Welcome,
)
from octosync.signaling.rooms import (
    SignalingHub,
    SignalingPolicy,
)

CONNS = range(6)
PEERS = range(5)
SESSIONS = ("a", "b")
ALLOWED = {0: frozenset({1, 2}), 1: frozenset({0}), 2: frozenset(), 3: frozenset({0, 1, 2})}


class SignalingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.mode = "open"
        self.hub = SignalingHub(SignalingPolicy("open"))
        self.joined: dict[int, tuple[str, int]] = {}  # conn -> (session, peer)

    def roster(self, session: str) -> dict[int, int]:
        return {p: c for c, (s, p) in self.joined.items() if s == session}

    @rule(allowlist=st.booleans())
    def restart(self, allowlist: bool) -> None:
        self.mode = "allowlist" if allowlist else "open"
        grants = ALLOWED if allowlist else {}
        self.hub = SignalingHub(SignalingPolicy(self.mode, grants))  # type: ignore[arg-type]
        self.joined = {}

    @rule(
        conn=st.sampled_from(CONNS), session=st.sampled_from(SESSIONS), peer=st.sampled_from(PEERS)
    )
    def join(self, conn: int, session: str, peer: int) -> None:
        roster = self.roster(session)
        try:
            out = self.hub.handle(conn, session, Join(peer=peer))
        except DuplicatePeer:
            assert conn in self.joined or peer in roster
            return
        except Forbidden:
            assert self.mode == "allowlist"
            assert peer not in ALLOWED
            return
        assert conn not in self.joined
        assert peer not in roster
        assert out[0] == (conn, Welcome(peer=peer, peers=tuple(sorted(roster))))
        assert sorted(out[1:]) == sorted((c, PeerJoined(peer=peer)) for c in roster.values())
        self.joined[conn] = (session, peer)

    @rule(conn=st.sampled_from(CONNS), to=st.sampled_from(PEERS), relay=st.booleans())
    def signal(self, conn: int, to: int, relay: bool) -> None:
        msg = Relay(to=to, payload={"from": 99}) if relay else Offer(to=to, sdp="v=0")
        entry = self.joined.get(conn)
        try:
            out = self.hub.handle(conn, entry[0] if entry else "a", msg)
        except NotJoined:
            assert entry is None
            return
        except UnknownTarget:
            assert entry is not None
            assert to not in self.roster(entry[0])
            return
        except Forbidden:
            assert entry is not None
            assert self.mode == "allowlist"
            assert to not in ALLOWED.get(entry[1], frozenset())
            return
        assert entry is not None
        session, sender = entry
        target = self.roster(session)[to]
        expected = (
            RelayFrom(from_=sender, payload={"from": 99})
            if relay
            else OfferFrom(from_=sender, sdp="v=0")
        )
        assert out == [(target, expected)]  # from is the registered id, never the payload's

    @rule(conn=st.sampled_from(CONNS), explicit=st.booleans())
    def leave(self, conn: int, explicit: bool) -> None:
        entry = self.joined.get(conn)
        if explicit:
            try:
                out = self.hub.handle(conn, entry[0] if entry else "a", Leave())
            except NotJoined:
                assert entry is None
                return
        else:
            out = self.hub.leave(conn)
        if entry is None:
            assert out == []
            return
        session, peer = self.joined.pop(conn)
        others = self.roster(session)
        assert sorted(out) == sorted((c, PeerLeft(peer=peer)) for c in others.values())

    @invariant()
    def rosters_match(self) -> None:
        for session in SESSIONS:
            assert self.hub.roster(session) == sorted(self.roster(session))
        for conn in CONNS:
            entry = self.joined.get(conn)
            assert self.hub.peer_of(conn) == (entry[1] if entry else None)


SignalingMachine.TestCase.settings = settings(
    stateful_step_count=30, max_examples=60, deadline=None
)
TestSignalingMachine = SignalingMachine.TestCase
