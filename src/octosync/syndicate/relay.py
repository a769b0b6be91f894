"""The server side of Syndicate's relay protocol, sans-I/O: packets in, packets out, decisions.

``Relay`` hosts named dataspaces (``dataspace.Dataspace``) and one ``RelayConnection`` per
peer. A connection's turn is checked whole before anything is applied: every target OID must
be one the connection holds, every ``yours`` ref too, handles must be fresh (``Assert``) or live
(``Retract``), values and ``Observe`` patterns must translate. A bad turn raises a typed error
(``UnknownOid``, ``HandleInUse``, ``UnknownHandle``, ``InvalidValue``, ``InvalidPattern``) and
changes nothing; the face answers ``Error`` and closes, and ``disconnect`` then retracts what the
connection had asserted, as for any close (presence).

Entities live on the server: the gatekeeper (OID 0 of every connection), the dataspaces, and
proxies for objects the peers exported (``RemoteEntity``: events for them are queued as turn
events on their connection). Everything asserted through a ref passes its caveats first.
Observers get Syndicate's semantics: each distinct capture vector is asserted to the observer
once (as a sequence) and retracted when it stops matching; messages are sent once per match.

``Relay(secret, record=True)`` also notes what each dataspace took (``activity``: assertions,
retractions and messages that passed the caveats, with the connection that caused them), for
the server to journal and the pipeline to count; ``take_activity`` drains it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import preserves

from octosync.dataspace import Dataspace
from octosync.dataspace.pattern import analyse
from octosync.dataspace.skeleton import Captures
from octosync.dataspace.values import Key, Record, Symbol, checked_key, key
from octosync.errors import (
    DecodeError,
    HandleInUse,
    InvalidValue,
    OctosyncError,
    RelayError,
    UnknownHandle,
    UnknownOid,
)
from octosync.syndicate import caveats as cav
from octosync.syndicate import sturdy
from octosync.syndicate.membrane import Membrane, WireSymbol, drop, grab
from octosync.syndicate.values import (
    Ref,
    Value,
    from_wire,
    observe_parts,
    pattern_of,
    to_wire,
)
from octosync.wire.syndicate import (
    Assert,
    Error,
    Message,
    Mine,
    Packet,
    Retract,
    Sync,
    Turn,
    TurnEvent,
    Yours,
)

GATEKEEPER_OID = 0
RESOLVE = Symbol("resolve")
ACCEPTED = Symbol("accepted")
REJECTED = Symbol("rejected")
REF = Symbol("ref")
OID, SIG, CAVEATS = Symbol("oid"), Symbol("sig"), Symbol("caveats")


class Entity:
    """What a ref points at: it receives assertions, retractions, messages and syncs."""

    def on_assert(self, relay: Relay, value: Value, handle: int) -> None:
        pass

    def on_retract(self, relay: Relay, handle: int) -> None:
        pass

    def on_message(self, relay: Relay, value: Value) -> None:
        pass

    def on_sync(self, relay: Relay, peer: Ref) -> None:
        relay.send_to(peer, True)


class RemoteEntity(Entity):
    """An object a peer exported (its ``mine`` OID): events become turn events to that peer."""

    __slots__ = ("conn", "oid")

    def __init__(self, conn: RelayConnection, oid: int) -> None:
        self.conn = conn
        self.oid = oid

    def __eq__(self, other: object) -> bool:
        return type(other) is RemoteEntity and other.conn is self.conn and other.oid == self.oid

    def __hash__(self) -> int:
        return hash((id(self.conn), self.oid))

    def __repr__(self) -> str:
        return f"RemoteEntity(conn={self.conn.id}, oid={self.oid})"

    def on_assert(self, relay: Relay, value: Value, handle: int) -> None:
        conn = self.conn
        if conn.closed:
            return
        pins: list[WireSymbol] = []
        wire = to_wire(value, conn.ref_out(pins))
        grab(pins)
        conn.outbound[handle] = pins
        relay.emit(conn, TurnEvent(self.oid, Assert(wire, handle)))

    def on_retract(self, relay: Relay, handle: int) -> None:
        conn = self.conn
        pins = conn.outbound.pop(handle, None)
        if conn.closed or pins is None:
            return
        relay.emit(conn, TurnEvent(self.oid, Retract(handle)))
        drop(pins)

    def on_message(self, relay: Relay, value: Value) -> None:
        conn = self.conn
        if not conn.closed:
            pins: list[WireSymbol] = []
            relay.emit(conn, TurnEvent(self.oid, Message(to_wire(value, conn.ref_out(pins)))))
            forget_transient(pins)

    def on_sync(self, relay: Relay, peer: Ref) -> None:
        conn = self.conn
        if not conn.closed:
            pins: list[WireSymbol] = []
            relay.emit(conn, TurnEvent(self.oid, Sync(conn.ref_out(pins)(peer))))
            forget_transient(pins)


def forget_transient(pins: list[WireSymbol]) -> None:
    """Refs exported only inside a message (or sync) are not held by anything: forget them,
    as Syndicate does, so a stream of messages cannot grow the peer's OID table."""
    for ws in pins:
        if ws.count <= 0:
            ws.membrane.forget(ws)


Action = Literal["assert", "retract", "message"]


class Activity(NamedTuple):
    """One thing a dataspace took: ``action`` is ``assert``, ``retract`` or ``message``;
    ``handle`` the server's handle of the assertion (0 for a message); ``value`` what was
    asserted or sent (None for a retraction); ``label`` the record label's text (the
    retracted assertion's for a retraction, empty for a value that is not a record);
    ``conn`` the connection whose turn (or close) caused it."""

    dataspace: str
    action: Action
    handle: int
    label: str
    value: Value
    conn: int | None


def label_of(value: Value) -> str:
    """The text of a record's label (a symbol's name); empty for any other value."""
    if type(value) is not Record:
        return ""
    label = value.label
    return label.name if type(label) is Symbol else str(label)


class _Observer:
    __slots__ = ("handles", "ref")

    def __init__(self, ref: Ref) -> None:
        self.ref = ref
        self.handles: dict[Key, int] = {}


class DataspaceEntity(Entity):
    """A named dataspace: assertions and ``Observe``s go into its skeleton index."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.space = Dataspace()
        self.handles: dict[int, int] = {}
        self.observers: dict[int, _Observer] = {}
        self.labels: dict[int, str] = {}
        """Each live assertion's label, while the relay records activity."""

    def __repr__(self) -> str:
        return f"DataspaceEntity({self.name!r})"

    def on_assert(self, relay: Relay, value: Value, handle: int) -> None:
        if relay.activity is not None:
            label = self.labels[handle] = label_of(value)
            relay.note(Activity(self.name, "assert", handle, label, value, None))
        parts = observe_parts(value)
        if parts is None:
            self.handles[handle] = self.space.assert_(value)
            return
        observer = _Observer(parts[1])
        self.observers[handle] = observer

        def on_add(caps: Captures) -> None:
            h = relay.new_handle()
            observer.handles[key(list(caps))] = h
            relay.assert_to(observer.ref, list(caps), h)

        def on_remove(caps: Captures) -> None:
            relay.retract(observer.handles.pop(key(list(caps))))

        def on_message(caps: Captures) -> None:
            relay.send_to(observer.ref, list(caps))

        pattern = pattern_of(parts[0])
        self.handles[handle] = self.space.observe(
            pattern, on_add, on_remove, on_message, interest=value
        )

    def on_retract(self, relay: Relay, handle: int) -> None:
        if relay.activity is not None:
            label = self.labels.pop(handle, "")
            relay.note(Activity(self.name, "retract", handle, label, None, None))
        self.space.retract(self.handles.pop(handle))
        observer = self.observers.pop(handle, None)
        if observer is not None:  # a removed observer's matches are retracted from it
            for h in list(observer.handles.values()):
                relay.retract(h)
            observer.handles.clear()

    def on_message(self, relay: Relay, value: Value) -> None:
        if relay.activity is not None:
            relay.note(Activity(self.name, "message", 0, label_of(value), value, None))
        self.space.send(value)


class Gatekeeper(Entity):
    """OID 0: resolves ``<resolve <ref {oid sig caveats}> #:observer>`` to a dataspace."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.answers: dict[int, int] = {}

    def on_assert(self, relay: Relay, value: Value, handle: int) -> None:
        if not (type(value) is Record and value.label == RESOLVE and len(value.fields) == 2):
            return  # not a request for the gatekeeper: ignored, as Syndicate does
        step, observer = value.fields
        if type(observer) is not Ref:
            return
        answer = self.resolve(relay, step)
        h = relay.new_handle()
        self.answers[handle] = h
        relay.assert_to(observer, answer, h)

    def on_retract(self, relay: Relay, handle: int) -> None:
        h = self.answers.pop(handle, None)
        if h is not None:
            relay.retract(h)

    def resolve(self, relay: Relay, step: Value) -> Value:
        if not (type(step) is Record and step.label == REF and len(step.fields) == 1):
            return Record(REJECTED, "not a sturdy ref step")
        params = step.fields[0]
        if type(params) is not dict or OID not in params or SIG not in params:
            return Record(REJECTED, "a sturdy ref has {oid: ..., sig: ...}")
        oid, sig = params[OID], params[SIG]
        caveats = params.get(CAVEATS, [])
        if type(caveats) is not list:
            return Record(REJECTED, "caveats must be a sequence")
        try:
            wire_oid = to_wire(oid, _no_refs)
            wire_caveats = [to_wire(c, _no_refs) for c in caveats]
        except (InvalidValue, DecodeError):
            return Record(REJECTED, "a sturdy ref cannot embed refs")
        if type(oid) is not str or not sturdy.verify(self.secret, wire_oid, sig, wire_caveats):
            return Record(REJECTED, "bad signature")
        conn = relay.current
        if conn is not None and not conn.allows(oid):
            return Record(REJECTED, f"the credentials do not grant dataspace {oid!r}")
        if conn is not None:
            conn.resolved = True
        return Record(ACCEPTED, Ref(relay.dataspace(oid), tuple(caveats)))


def _no_refs(ref: Ref) -> Any:
    raise InvalidValue("refs cannot be signed")


class RelayConnection:
    """One peer: its OID tables both ways and the handles it asserted."""

    def __init__(self, relay: Relay, conn_id: int, allows: Callable[[str], bool]) -> None:
        self.relay = relay
        self.id = conn_id
        self.allows = allows
        self.exported = Membrane()
        """Server objects the peer may name (our ``mine``, its ``yours``); OID 0 is the
        gatekeeper, held for the connection's life."""
        self.imported = Membrane()
        """Objects the peer exported (its ``mine``)."""
        self.inbound: dict[int, tuple[int, list[WireSymbol]]] = {}
        """Peer handle -> (server handle, pins)."""
        self.outbound: dict[int, list[WireSymbol]] = {}
        """Server handle of an assertion sent to this peer -> the exported symbols it pins."""
        self.pending: list[TurnEvent] = []
        self.resolved = False
        self.closed = False
        self.next_oid = GATEKEEPER_OID + 1
        self.exported.add(GATEKEEPER_OID, Ref(relay.gatekeeper), count=1)

    def ref_out(self, pins: list[WireSymbol]) -> Callable[[Ref], Any]:
        """Local ref -> wire ref for this peer; new exports are appended to ``pins``."""

        def out(ref: Ref) -> Any:
            entity = ref.entity
            if type(entity) is RemoteEntity and entity.conn is self and not ref.attenuation:
                return Yours(entity.oid)
            ws = self.exported.by_ref.get(ref)
            if ws is None:
                ws = self.exported.add(self.next_oid, ref)
                self.next_oid += 1
            pins.append(ws)
            return Mine(ws.oid)

        return out

    def ref_in(self, pins: list[WireSymbol], path: str) -> Callable[[Any], Ref]:
        """Wire ref from this peer -> local ref; the symbols it uses are appended to ``pins``."""

        def into(wire: Any) -> Ref:
            if type(wire) is Mine:
                ws = self.imported.by_oid.get(wire.oid)
                if ws is None:
                    ws = self.imported.add(wire.oid, Ref(RemoteEntity(self, wire.oid)))
                pins.append(ws)
                return ws.ref
            ws = self.exported.by_oid.get(wire.oid)
            if ws is None:
                raise UnknownOid(f"no object with OID {wire.oid} was given to this peer", path=path)
            pins.append(ws)
            if not wire.attenuation:
                return ws.ref
            extra = tuple(from_wire(c, into, path) for c in wire.attenuation)
            return Ref(ws.ref.entity, (*ws.ref.attenuation, *extra))

        return into


class Relay:
    """Every dataspace and connection of one server (see the module docstring)."""

    def __init__(self, secret: bytes, *, record: bool = False) -> None:
        self.gatekeeper = Gatekeeper(secret)
        self.dataspaces: dict[str, DataspaceEntity] = {}
        self.conns: dict[int, RelayConnection] = {}
        self.routes: dict[int, tuple[Ref, bool]] = {}
        """Live server handle -> (the ref it was asserted at, whether its caveats let it in)."""
        self.current: RelayConnection | None = None
        self._next_handle = 1
        self._dirty: list[RelayConnection] = []
        self.activity: list[Activity] | None = [] if record else None
        """What the dataspaces took since the last ``take_activity`` (None: not recorded)."""
        self._closing: int | None = None

    # -- connections ------------------------------------------------------------------------

    def connect(self, conn_id: int, allows: Callable[[str], bool] = lambda name: True) -> None:
        self.conns[conn_id] = RelayConnection(self, conn_id, allows)

    def is_resolved(self, conn_id: int) -> bool:
        conn = self.conns.get(conn_id)
        return conn is not None and conn.resolved

    def disconnect(self, conn_id: int) -> None:
        """The connection is gone: retract everything it asserted (every observer sees it)."""
        conn = self.conns.pop(conn_id, None)
        if conn is None:
            return
        conn.closed = True
        conn.pending.clear()
        self._closing = conn_id
        try:
            for server_handle, _pins in list(conn.inbound.values()):
                self.retract(server_handle)
        finally:
            self._closing = None
        conn.inbound.clear()
        conn.outbound.clear()

    def dataspace(self, name: str) -> DataspaceEntity:
        ds = self.dataspaces.get(name)
        if ds is None:
            ds = self.dataspaces[name] = DataspaceEntity(name)
        return ds

    # -- packets in ------------------------------------------------------------------------

    def receive(self, conn_id: int, packet: Packet) -> None:
        """Apply one packet from ``conn_id``; a bad one raises and changes nothing."""
        conn = self.conns[conn_id]
        if type(packet) is Turn:
            steps = self._check(conn, packet)
            self.current = conn
            try:
                for step in steps:
                    step()
            finally:
                self.current = None
        elif type(packet) is Error:
            raise RelayError(f"the peer reported an error: {packet.message}", path="error")

    def _check(self, conn: RelayConnection, turn: Turn) -> list[Callable[[], None]]:
        steps: list[Callable[[], None]] = []
        fresh: set[int] = set()
        gone: set[int] = set()
        for i, te in enumerate(turn.events):
            where = f"turn[{i}]"
            target = conn.exported.by_oid.get(te.oid)
            if target is None:
                raise UnknownOid(f"this connection holds no OID {te.oid}", path=f"{where}.oid")
            event = te.event
            pins: list[WireSymbol] = [target]
            if type(event) is Assert:
                h = event.handle
                if (h in conn.inbound and h not in gone) or h in fresh:
                    raise HandleInUse(f"handle {h} is still asserted", path=f"{where}.handle")
                fresh.add(h)
                gone.discard(h)
                value = self._local(conn, event.assertion, pins, f"{where}.assertion")
                steps.append(_bind(self._do_assert, conn, target.ref, value, h, pins))
            elif type(event) is Retract:
                h = event.handle
                if h in gone or (h not in conn.inbound and h not in fresh):
                    raise UnknownHandle(f"handle {h} is not asserted", path=f"{where}.handle")
                gone.add(h)
                fresh.discard(h)
                steps.append(_bind(self._do_retract, conn, h))
            elif type(event) is Message:
                value = self._local(conn, event.body, pins, f"{where}.body")
                steps.append(_bind(self._do_message, conn, target.ref, value, pins))
            else:
                assert type(event) is Sync
                peer = conn.ref_in(pins, f"{where}.peer")(event.peer)
                steps.append(_bind(self._do_sync, conn, target.ref, peer, pins))
        return steps

    def _local(self, conn: RelayConnection, v: Any, pins: list[WireSymbol], path: str) -> Value:
        try:
            value = from_wire(v, conn.ref_in(pins, path), path)
        except TypeError:
            raise InvalidValue("a dict key or set member that is a sequence", path=path) from None
        checked_key(value, path)
        parts = observe_parts(value)
        if parts is not None:
            analyse(pattern_of(parts[0], f"{path}.pattern"))
        return value

    def _do_assert(
        self, conn: RelayConnection, target: Ref, value: Value, h: int, pins: list[WireSymbol]
    ) -> None:
        grab(pins)
        server_handle = self.new_handle()
        conn.inbound[h] = (server_handle, pins)
        self.assert_to(target, value, server_handle)

    def _do_retract(self, conn: RelayConnection, h: int) -> None:
        server_handle, pins = conn.inbound.pop(h)
        self.retract(server_handle)
        drop(pins)

    def _do_message(
        self, conn: RelayConnection, target: Ref, value: Value, pins: list[WireSymbol]
    ) -> None:
        grab(pins)
        self.send_to(target, value)
        drop(pins)

    def _do_sync(
        self, conn: RelayConnection, target: Ref, peer: Ref, pins: list[WireSymbol]
    ) -> None:
        grab(pins)
        target.entity.on_sync(self, peer)  # type: ignore[attr-defined]
        drop(pins)

    # -- what entities do ------------------------------------------------------------------

    def note(self, activity: Activity) -> None:
        """Record what a dataspace took, naming the connection whose turn or close caused it."""
        assert self.activity is not None
        conn = self.current.id if self.current is not None else self._closing
        self.activity.append(activity._replace(conn=conn))

    def take_activity(self) -> list[Activity]:
        """The activity since the last call, in the order the dataspaces took it."""
        taken = self.activity or []
        if self.activity is not None:
            self.activity = []
        return taken

    def new_handle(self) -> int:
        h = self._next_handle
        self._next_handle = h + 1
        return h

    def assert_to(self, ref: Ref, value: Value, handle: int) -> None:
        if ref.attenuation:
            value = cav.attenuate(ref.attenuation, value)
        admitted = value is not None
        self.routes[handle] = (ref, admitted)
        if admitted:
            ref.entity.on_assert(self, value, handle)  # type: ignore[attr-defined]

    def retract(self, handle: int) -> None:
        route = self.routes.pop(handle, None)
        if route is not None and route[1]:
            route[0].entity.on_retract(self, handle)  # type: ignore[attr-defined]

    def send_to(self, ref: Ref, value: Value) -> None:
        if ref.attenuation:
            value = cav.attenuate(ref.attenuation, value)
            if value is None:
                return
        ref.entity.on_message(self, value)  # type: ignore[attr-defined]

    def emit(self, conn: RelayConnection, event: TurnEvent) -> None:
        if not conn.pending:
            self._dirty.append(conn)
        conn.pending.append(event)

    # -- packets out -----------------------------------------------------------------------

    def take_output(self) -> list[tuple[int, Turn]]:
        """One ``Turn`` per connection that has events, in the order they became due."""
        out = [(c.id, Turn(tuple(c.pending))) for c in self._dirty if c.pending and not c.closed]
        for c in self._dirty:
            c.pending = []
        self._dirty = []
        return out


def error_packet(err: OctosyncError) -> Error:
    """The ``Error`` packet a peer gets before its connection is closed."""
    detail = preserves.Record(preserves.Symbol("octosync"), [err.name, err.code, err.path or ""])
    return Error(err.message, detail)


def _bind(fn: Callable[..., None], *args: object) -> Callable[[], None]:
    return lambda: fn(*args)
