"""The TopGun face's protocol object: one MsgPack message per binary WebSocket frame.

TopGun authenticates in-band: with auth on, the session greets with ``AUTH_REQUIRED`` and
takes ``AUTH {token, deviceToken?}`` (the server's JWT keys, ``server.auth``), answering
exactly one ``AUTH_ACK {userId, deviceId, deviceToken?}``, or ``AUTH_FAIL`` and a close; with
``--insecure-dev`` a token-less client's ``DEVICE_HELLO {deviceToken?}`` gets
``DEVICE_ACK {deviceId, deviceToken?}`` (a JWT server drops it, as TopGun's does). Until then
only ``PING`` is answered; any other message is dropped unread, as TopGun's server drops it
(its cluster client's pooled connections send ``PARTITION_MAP_REQUEST`` and ops as soon as
the socket opens, before ``AUTH_ACK``, and resend them), and the connection loop's handshake
deadline closes an idle socket. After it, the rules are ``topgun.TopGunCore``'s.

The device identity (``refresh.device_tokens``) is bound once per connection, off the
loop (``TopGunPort.bind_device``): the session is open at once, and the ack waits in the
reply queue, ahead of every reply after it, until the binding is committed.

Bytes for this connection go out through ``outgoing`` (written after each frame) or, when they
wait for the journal (``PERSISTED`` acks) or the cluster (``REPLICATED`` acks, through
``TopGunPort.replicator``), through ``TopGunPort.deliver`` once that is done; replies stay in order
behind a pending ack. Messages for other connections go through
``TopGunPort.deliver``: a peer that cannot keep up is dropped, and resyncs by Merkle on reconnect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from octosync.errors import DecodeError, OctosyncError, Overloaded, Unauthorized
from octosync.hub.policy import closes_connection
from octosync.refresh.device_tokens import Binding
from octosync.server.auth import ANONYMOUS_DEV, ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.lifecycle import Lifecycle
from octosync.server.ports import TopGunPort
from octosync.server.topgun_effects import Release, carry_out
from octosync.store.commit_path import Ask, Failed
from octosync.topgun import replies
from octosync.wire import topgun as tg
from octosync.wire.websocket import ws_frame


class State(Enum):
    AWAIT_AUTH = 1
    OPEN = 2
    CLOSED = 3


LIFECYCLE: dict[tuple[State, str], State] = {
    (State.AWAIT_AUTH, "auth"): State.OPEN,
    (State.AWAIT_AUTH, "close"): State.CLOSED,
    (State.OPEN, "close"): State.CLOSED,
}

_WRITES = (tg.OpBatch, tg.ClientOpMessage)
_JOURNALED = (*_WRITES, tg.ORMapPushDiff, tg.CounterSync, tg.LockRequest)
"""Messages whose effects may need the journal: refused up front while it cannot commit."""
WRITE = Ask(Overloaded, "reconnect and resend")
JOURNALED = Ask(Overloaded, "reconnect and resend", room=False)
"""How the storage rules' refusals read on this face: writes take a place in the writer's
queue; other journaled messages ask only the journal's health (and any rule of the disk)."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """A request that failed to decode, and the response that tells its caller so."""

    reply: tg.Message


class TopGunSession:
    face = FaceName.TOPGUN
    byte_stream = False
    offload_decode = False

    def __init__(self, rt: TopGunPort, conn: int) -> None:
        self.rt = rt
        self.conn = conn
        self.identity: ClaimGrants | None = None
        self.life = Lifecycle(LIFECYCLE, State.AWAIT_AUTH)
        self.max_frame = rt.max_frame
        self.outgoing: list[bytes] = []
        self._held: deque[tuple[list[bool], list[bytes]]] = deque()
        """Replies queued behind an ack still waiting (a commit, a device binding), in order."""
        self._handling = False
        self.messages_in_frame = 1
        """What the last frame carried (a ``BATCH``: its inner messages), for the connection's
        frame budget."""
        if not rt.insecure_dev:
            self._reply(tg.encode(tg.AuthRequired()))

    @property
    def ready(self) -> bool:
        return self.life.state is State.OPEN

    def decode(self, data: bytes) -> tg.Message | _Refused:
        try:
            return tg.decode(data, max_size=self.max_frame)
        except DecodeError as err:  # a request with a bad field still gets its own response
            reply = replies.refusal_of_frame(data, err) if self.ready else None
            if reply is None:
                raise
            return _Refused(reply)

    def handle(self, message: tg.Message | _Refused) -> None:
        self.messages_in_frame = 1
        self._handling = True
        try:
            self._handle(message)
        finally:
            self._handling = False

    def _handle(self, message: tg.Message | _Refused) -> None:
        if isinstance(message, _Refused):
            self._reply(tg.encode(message.reply))
            return
        if self.life.state is State.AWAIT_AUTH:
            self._authenticate(message)
            return
        if isinstance(message, tg.Batch):
            self._batch(message)
            return
        holder = self.rt.map_holder
        if holder is not None and not holder.take(self.conn, message, self._resume):
            return  # it waits for a map's load (and so does every message behind it)
        self._apply(message)

    def _apply(self, message: tg.Message) -> None:
        rt = self.rt
        if isinstance(message, _JOURNALED):
            # the storage rules refuse up front: nothing applied, nothing acked
            rt.commits.refuse(WRITE if isinstance(message, _WRITES) else JOURNALED)
        carry_out(rt, self.conn, rt.topgun.handle(self.conn, message), self)

    def _resume(self, message: tg.Message) -> None:
        """A message that waited for its map's load, handled now: its replies go out at once
        (a refusal as it would have been answered then; one that closes the connection is
        raised, for the holder to reset it)."""
        if self.life.state is not State.OPEN:
            return
        self._handling = True
        try:
            self._apply(message)
        except OctosyncError as err:
            if closes_connection(err, byte_stream=False):
                raise
            self._reply(tg.encode(self.rt.topgun.error(err)))
        finally:
            self._handling = False
        if self.outgoing:
            data = b"".join(self.outgoing)
            self.outgoing.clear()
            self.rt.deliver(self.conn, data)

    def _batch(self, batch: tg.Batch) -> None:
        """Each inner message of a ``BATCH``, in order, as if it came in a frame of its own
        (as TopGun's server unpacks it). The whole frame is checked first: a bad length, a
        ``count`` that disagrees, more than ``MAX_BATCH_ITEMS`` frames or an inner message
        that does not decode refuses it with nothing of it applied. An inner request refused
        is answered as it would be alone, and the next is handled."""
        inner = tg.unpack_batch(batch, max_size=self.max_frame)
        self.messages_in_frame = max(1, len(inner))
        for message in inner:
            try:
                self._handle(message)
            except OctosyncError as err:
                if closes_connection(err, byte_stream=False):
                    raise
                self._reply(tg.encode(self.rt.topgun.error(err)))

    def _authenticate(self, message: tg.Message) -> None:
        match message:
            case tg.Auth(token=token, device_token=presented):
                identity = self.rt.authenticate(token)
                if identity.expired(self.rt.topgun.clock() / 1000):
                    raise Unauthorized("the token expired", path="exp")
                self._open(identity)
                subject = None if identity is ANONYMOUS_DEV else identity.subject
                node = self.rt.topgun.hlc.node_id  # the cluster node id, in a cluster

                def auth_ack(bound: Binding | None) -> tg.Message:
                    return tg.AuthAck(
                        connection_id=str(self.conn),
                        server_node_id=node,
                        user_id=subject,
                        device_id=None if bound is None else bound.device_id,
                        device_token=None if bound is None else bound.token,
                    )

                self._bind_device(subject, presented, auth_ack)
            case tg.DeviceHello(device_token=presented):
                if not self.rt.insecure_dev:
                    return  # a JWT server drops it; the client answers AUTH_REQUIRED
                self._open(ANONYMOUS_DEV)

                def device_ack(bound: Binding | None) -> tg.Message:
                    if bound is None:
                        return tg.DeviceAck()
                    return tg.DeviceAck(device_id=bound.device_id, device_token=bound.token)

                self._bind_device(None, presented, device_ack)
            case tg.Ping(timestamp=ts):
                pong = tg.Pong(timestamp=ts, server_time=self.rt.topgun.clock())
                self._reply(tg.encode(pong))
            case _:
                return  # dropped unread, as TopGun's server does (its pooled client sends early)

    def _bind_device(
        self,
        subject: str | None,
        presented: str | None,
        ack: Callable[[Binding | None], tg.Message],
    ) -> None:
        """Bind the device off the loop; its ack holds a place in the reply queue meanwhile."""
        slot: tuple[list[bool], list[bytes]] = ([False], [])
        self._held.append(slot)

        def bound(binding: Binding | None) -> None:
            slot[1].insert(0, ws_frame(tg.encode(ack(binding)), text=False))
            slot[0][0] = True
            self._release()

        self.rt.bind_device(subject, presented, bound)

    def _open(self, identity: ClaimGrants) -> None:
        self.identity = identity
        self.rt.topgun.connect(self.conn, identity)
        self.life.move("auth")

    def now(self, data: list[bytes]) -> None:
        """``Own``: replies due now, behind any reply still held."""
        for reply in data:
            self._reply(reply)

    def hold(self) -> Release:
        """``Own``: a place in the reply queue for acks that wait (a commit, the cluster)."""
        slot: tuple[list[bool], list[bytes]] = ([False], [])
        self._held.append(slot)

        def release(data: list[bytes]) -> None:
            slot[1][0:0] = [ws_frame(d, text=False) for d in data]
            slot[0][0] = True
            self._release()

        return release

    failed: Failed | None = None
    """``Own``: a failed commit resets the connection (told nothing, the client resends)."""

    def _reply(self, data: bytes) -> None:
        frame = ws_frame(data, text=False)
        if self._held:
            self._held[-1][1].append(frame)
        else:
            self.outgoing.append(frame)

    def _release(self) -> None:
        """Send every reply whose durable acks before it are committed."""
        out: list[bytes] = []
        while self._held and self._held[0][0][0]:
            out.extend(self._held.popleft()[1])
        if not out:
            return
        if self._handling:  # released while a frame is handled: written after it, in order
            self.outgoing.extend(out)
        else:
            self.rt.deliver(self.conn, b"".join(out))

    def error_frame(self, err: OctosyncError) -> bytes:
        if self.life.state is State.AWAIT_AUTH and isinstance(err, Unauthorized):
            fail = tg.AuthFail(reason=err.message, error=err.message, code=401)
            return ws_frame(tg.encode(fail), text=False)
        return ws_frame(tg.encode(self.rt.topgun.error(err)), text=False)

    def send_error(self, err: OctosyncError) -> None:
        self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        self.life.move("close")
        if self.rt.map_holder is not None:
            self.rt.map_holder.closed(self.conn)
        self.rt.apply(self.rt.topgun.disconnect(self.conn))
