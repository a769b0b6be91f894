"""A wire-level peer for the relay tests: packets go through the real codec both ways."""

from __future__ import annotations

from typing import Any

from preserves import Embedded, Record, Symbol

from octosync.syndicate import Relay, mint
from octosync.wire.syndicate import (
    Assert,
    Message,
    Mine,
    Retract,
    Sync,
    Turn,
    TurnEvent,
    WireRef,
    Yours,
    decode_packet,
    encode_packet,
)

SECRET = b"relay-test-secret-0123456789abcd"
RESOLVER_OID = 900
"""The OID under which a ``WirePeer`` exports the observer of its ``resolve``."""


def sym(name: str) -> Symbol:
    return Symbol(name)


def rec(label: str, *fields: Any) -> Record:
    return Record(Symbol(label), list(fields))


def discard() -> Record:
    return rec("_")


def bind(p: Any = None) -> Record:
    return rec("bind", discard() if p is None else p)


def lit(v: Any) -> Record:
    return rec("lit", v)


def group_rec(label: Any, *fields: Any) -> Record:
    return rec("group", rec("rec", label), {i: f for i, f in enumerate(fields)})


def observe(pattern: Any, observer_oid: int) -> Record:
    return rec("Observe", pattern, Embedded(Mine(observer_oid)))


class WirePeer:
    """One connection to ``relay`` as a client sees it: what its exported objects were told."""

    def __init__(
        self, relay: Relay, conn_id: int, net: dict[int, WirePeer], allows: Any = None
    ) -> None:
        self.relay = relay
        self.id = conn_id
        self.net = net
        net[conn_id] = self
        if allows is None:
            relay.connect(conn_id)
        else:
            relay.connect(conn_id, allows)
        self.live: dict[int, dict[int, Any]] = {}
        """Exported OID -> handle -> assertion currently asserted to it."""
        self.messages: dict[int, list[Any]] = {}
        self.syncs: dict[int, int] = {}
        self.next_handle = 1

    # -- sending ------------------------------------------------------------------------

    def send(self, *events: TurnEvent) -> None:
        """One turn, through the codec; the relay's output is handed to every WirePeer."""
        packet = decode_packet(encode_packet(Turn(events)))
        self.relay.receive(self.id, packet)
        pump(self.relay, self.net)

    def close(self) -> None:
        self.relay.disconnect(self.id)
        del self.net[self.id]
        pump(self.relay, self.net)

    def publish(self, oid: int, value: Any) -> int:
        h = self.next_handle
        self.next_handle += 1
        self.send(TurnEvent(oid, Assert(value, h)))
        return h

    def retract(self, oid: int, handle: int) -> None:
        self.send(TurnEvent(oid, Retract(handle)))

    def message(self, oid: int, body: Any) -> None:
        self.send(TurnEvent(oid, Message(body)))

    def sync(self, oid: int, peer: WireRef) -> None:
        self.send(TurnEvent(oid, Sync(peer)))

    def resolve(self, step: Any = None) -> Any:
        """Assert a resolve for ``step`` (default: a good ref to ``demo``); the answer."""
        step = mint(SECRET, "demo") if step is None else step
        self.publish(0, rec("resolve", step, Embedded(Mine(RESOLVER_OID))))
        return self.answer()

    def answer(self) -> Any:
        answers = list(self.live.get(RESOLVER_OID, {}).values())
        return answers[-1] if answers else None

    def dataspace_oid(self) -> int:
        accepted = self.answer()
        assert accepted is not None
        assert accepted.key == Symbol("accepted"), accepted
        ref = accepted.fields[0].embeddedValue
        assert isinstance(ref, Mine)
        return ref.oid

    # -- receiving ----------------------------------------------------------------------

    def take(self, turn: Turn) -> None:
        for te in turn.events:
            e = te.event
            if isinstance(e, Assert):
                table = self.live.setdefault(te.oid, {})
                assert e.handle not in table, "the relay reused a live handle"
                table[e.handle] = e.assertion
            elif isinstance(e, Retract):
                del self.live[te.oid][e.handle]
            elif isinstance(e, Message):
                self.messages.setdefault(te.oid, []).append(e.body)
            else:
                self.syncs[te.oid] = self.syncs.get(te.oid, 0) + 1

    def seen(self, oid: int) -> list[Any]:
        return sorted(self.live.get(oid, {}).values(), key=repr)


def pump(relay: Relay, net: dict[int, WirePeer]) -> None:
    """Deliver the relay's output packets (through the codec) to the peers they are for."""
    for conn_id, turn in relay.take_output():
        decoded = decode_packet(encode_packet(turn))
        assert isinstance(decoded, Turn)
        net[conn_id].take(decoded)


class Net:
    """A relay and its peers."""

    def __init__(self, secret: bytes = SECRET, *, record: bool = False) -> None:
        self.relay = Relay(secret, record=record)
        self.peers: dict[int, WirePeer] = {}
        self._ids = 0

    def peer(self, allows: Any = None, *, resolve: bool = True) -> WirePeer:
        self._ids += 1
        p = WirePeer(self.relay, self._ids, self.peers, allows)
        if resolve:
            p.resolve()
        return p


__all__ = ["Mine", "Yours"]
