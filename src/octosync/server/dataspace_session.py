"""The dataspace face: Syndicate's network protocol, so unmodified syndicate-py programs connect.

One Preserves packet per WebSocket message (``/dataspace``) or a plain stream of packets on TCP
(``--dataspace-port``). Credentials follow the other faces (JWT at the upgrade on WebSocket; on
TCP, where a Syndicate peer cannot present one, only ``--insecure-dev`` admits it), then the
gatekeeper at OID 0 resolves a sturdy ref to a dataspace the credentials grant
(``publish`` on ``dataspace:NAME``). Until a ref resolves the handshake deadline applies.
The relay (``syndicate.relay``) decides everything; this class moves its packets: to this
connection through ``outgoing``, to other connections through ``DataspacePort.deliver`` (a peer that
cannot keep up is dropped, and its assertions retracted, never waited for). Any error ends the
connection after an ``Error`` packet, as Syndicate's relays do. With a journal, what each turn
(and each close) does to the dataspaces is journaled after it (``store.dataspace_hook``); a turn
is refused while the journal could not take it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Literal

from octosync.errors import OctosyncError
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.lifecycle import Lifecycle
from octosync.server.ports import DataspacePort
from octosync.syndicate import error_packet
from octosync.wire.syndicate import Packet, PreDecoded, decode_packet, encode_packet, packet_of
from octosync.wire.websocket import ws_frame

DATASPACE_GRANT_PREFIX = "dataspace:"
"""A JWT grants dataspace NAME as ``{"streams": {"dataspace:NAME": ["publish"]}}``."""

Transport = Literal["ws", "tcp"]


class State(Enum):
    AWAIT_RESOLVE = 1
    RESOLVED = 2
    CLOSED = 3


LIFECYCLE: dict[tuple[State, str], State] = {
    (State.AWAIT_RESOLVE, "turn"): State.AWAIT_RESOLVE,
    (State.AWAIT_RESOLVE, "resolved"): State.RESOLVED,
    (State.RESOLVED, "turn"): State.RESOLVED,
    (State.AWAIT_RESOLVE, "close"): State.CLOSED,
    (State.RESOLVED, "close"): State.CLOSED,
}
"""Only the gatekeeper is reachable until a sturdy ref resolves; then the dataspace too."""


def _ws(data: bytes) -> bytes:
    return ws_frame(data, text=False)


def _raw(data: bytes) -> bytes:
    return data


class DataspaceSession:
    face = FaceName.DATASPACE
    byte_stream = True
    """A Syndicate relay cannot resynchronise after a bad packet: every error closes."""
    offload_decode = False

    def __init__(
        self, rt: DataspacePort, conn: int, kind: Transport, identity: ClaimGrants | None
    ) -> None:
        self.rt = rt
        self.conn = conn
        self.kind = kind
        self.identity = identity
        self.max_frame = rt.max_frame
        self.outgoing: list[bytes] = []
        self.life = Lifecycle(LIFECYCLE, State.AWAIT_RESOLVE)
        self.frame: Callable[[bytes], bytes] = _ws if kind == "ws" else _raw
        self.relay = rt.relay
        self.relay.connect(conn, self._allows)
        rt.relay_framing[conn] = self.frame

    @property
    def ready(self) -> bool:
        return self.life.state is State.RESOLVED

    def _allows(self, name: str) -> bool:
        identity = self.identity
        return identity is not None and identity.allows(DATASPACE_GRANT_PREFIX + name, "publish")

    def decode(self, data: bytes) -> Packet:
        if type(data) is PreDecoded:
            return packet_of(data.value)
        return decode_packet(data)

    def handle(self, message: Packet) -> None:
        if self.identity is None:  # TCP: no upgrade carried credentials
            self.identity = self.rt.authenticate(None)
        self.life.move("turn")
        self.rt.check_activity_room()
        self.relay.receive(self.conn, message)
        self.rt.record_activity()
        if self.life.state is State.AWAIT_RESOLVE and self.relay.is_resolved(self.conn):
            self.life.move("resolved")
        self._flush()

    def error_frame(self, err: OctosyncError) -> bytes:
        return self.frame(encode_packet(error_packet(err)))

    def send_error(self, err: OctosyncError) -> None:
        self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        if self.life.allows("close"):
            self.life.move("close")
        self.relay.disconnect(self.conn)
        self.rt.record_activity()
        self.rt.relay_framing.pop(self.conn, None)
        self._flush()

    def _flush(self) -> None:
        framing = self.rt.relay_framing
        for target, turn in self.relay.take_output():
            data = encode_packet(turn)
            if target == self.conn:
                self.outgoing.append(self.frame(data))
            else:
                frame = framing.get(target)
                if frame is not None:
                    self.rt.deliver(target, frame(data))
