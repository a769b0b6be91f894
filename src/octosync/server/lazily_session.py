"""One lazily connection, whatever carries it (WebSocket messages or u32 TCP frames).

Handshake first and fail closed; the handshake's ``session_id`` names the stream; ``publish``
in its features makes the connection the producer; everyone else subscribes. The connection
loops of ``server.connection`` feed it frames and close it as ``hub.policy`` says.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from octosync.errors import (
    DecodeError,
    Forbidden,
    ForbiddenPublish,
    HandshakeFailed,
    OctosyncError,
)
from octosync.hub import ViewKey, lazily_frame
from octosync.hub.model import Sent
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION, negotiate
from octosync.ipc.messages import (
    CellSet,
    Delta,
    Handshake,
    IpcMessage,
    OutboxAck,
    ResyncRequest,
    Snapshot,
)
from octosync.server.auth import ClaimGrants, authenticate
from octosync.server.face_names import FaceName
from octosync.server.lazily_dialect import (
    SEED_JSON,
    FaceDialect,
    handshake_dialect,
    sniff_producer_dialect,
)
from octosync.server.lifecycle import Lifecycle
from octosync.server.runtime import Runtime
from octosync.server.view_encoders import lazily_view_key
from octosync.wire.framing import encode_frame
from octosync.wire.websocket import ws_frame

PROTOCOL_MAJOR = PROTOCOL_MAJOR_VERSION
SERVER_FEATURES = ("publish", "resync_request", "cell_set_write", "outbox_ack")
DURABLE_ACKS = "outbox_ack"
"""A producer that offers this feature gets ``OutboxAck {through_epoch}`` once its frames
through that epoch are committed to the journal: what it must keep to resend after a crash."""
TOKEN_FEATURE = "auth:"
"""A client that cannot send headers (plain TCP) may carry its JWT as feature ``auth:<jwt>``."""

Transport = Literal["ws", "tcp"]


def server_handshake(session_id: str, max_frame_size: int, codec: str = "json") -> Handshake:
    """The server's side of the handshake; it hosts whatever session the peer names."""
    return Handshake(
        protocol_id=PROTOCOL_ID,
        protocol_major_version=PROTOCOL_MAJOR,
        codec=codec,
        max_frame_size=max_frame_size,
        fragmentation_supported=False,
        ordered_reliable=True,
        peer_id=0,
        session_id=session_id,
        features=SERVER_FEATURES,
    )


class State(Enum):
    AWAIT_HANDSHAKE = 1
    PRODUCING = 2
    SUBSCRIBED = 3
    CLOSED = 4


LIFECYCLE: dict[tuple[State, str], State] = {
    (State.AWAIT_HANDSHAKE, "handshake_publish"): State.PRODUCING,
    (State.AWAIT_HANDSHAKE, "handshake_subscribe"): State.SUBSCRIBED,
    (State.AWAIT_HANDSHAKE, "close"): State.CLOSED,
    (State.PRODUCING, "close"): State.CLOSED,
    (State.SUBSCRIBED, "close"): State.CLOSED,
}
"""The lazily connection's lifecycle: one handshake decides the role for good."""


class LazilySession:
    """The lazily face's protocol object: bytes in, hub calls and error frames out.

    It never touches a socket: frames for the peer go through the hub (``send_control``) once
    the handshake registered it, and into ``outgoing`` before that, for the loop to write.
    """

    offload_decode = False
    """msgspec decodes even a frame at the limit in a few milliseconds."""

    def __init__(
        self, runtime: Runtime, conn: int, kind: Transport, identity: ClaimGrants | None
    ) -> None:
        self.rt = runtime
        self.conn = conn
        self.kind = kind
        self.identity = identity
        self.life = Lifecycle(LIFECYCLE, State.AWAIT_HANDSHAKE)
        self.dialect: FaceDialect = SEED_JSON
        self.sniffed = False
        self.stream = ""
        self.max_frame = runtime.limits.max_frame_bytes
        self.face = FaceName.TCP if kind == "tcp" else FaceName.LAZILY
        self.byte_stream = kind == "tcp"
        self.outgoing: list[bytes] = []

    @property
    def ready(self) -> bool:
        return self.life.state is not State.AWAIT_HANDSHAKE

    # --- Session --------------------------------------------------------------------------

    def decode(self, data: bytes) -> object:
        return data  # the dialect is chosen by the handshake and the first frame: see handle

    def handle(self, message: object) -> None:
        assert isinstance(message, bytes)
        state = self.life.state
        if state is State.AWAIT_HANDSHAKE:
            self._handshake(message)
            return
        if state is State.PRODUCING and not self.sniffed:
            self.sniffed = True
            sniffed = sniff_producer_dialect(self.dialect, message)
            if sniffed is not self.dialect:
                self.dialect = sniffed
                self.rt.hub.change_view(
                    self.conn, ViewKey("lazily", lazily_view_key(sniffed, self.kind))
                )
        msg = self.dialect.decode(message)
        if state is State.PRODUCING:
            self._produce(msg, message)
        else:
            self._subscribe(msg)

    def error_frame(self, err: OctosyncError) -> bytes:
        return self.frame(self.dialect.encode_error(err))

    def send_error(self, err: OctosyncError) -> None:
        if self.ready:
            self.rt.hub.send_control(self.conn, self.error_frame(err))
        else:
            self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        self.life.move("close")
        self.rt.durable_listeners.pop(self.conn, None)
        self.rt.hub.disconnect(self.conn)

    # --- internals ------------------------------------------------------------------------

    def frame(self, data: bytes) -> bytes:
        if self.kind == "tcp":
            return encode_frame(data)
        return ws_frame(data, text=self.dialect.text)

    def _handshake(self, data: bytes) -> None:
        try:
            dialect, remote = handshake_dialect(data)
        except DecodeError as exc:
            raise HandshakeFailed(
                f"first message must be a handshake: {exc.message}", path=exc.path
            ) from exc
        local = server_handshake(remote.session_id, self.max_frame, dialect.name)
        max_frame = negotiate(local, remote).max_frame_size
        identity = self.identity
        for feature in remote.features:
            if feature.startswith(TOKEN_FEATURE):
                identity = authenticate(feature[len(TOKEN_FEATURE) :], self.rt.config.auth)
        if identity is None:
            identity = authenticate(None, self.rt.config.auth)
        hub = self.rt.hub
        view = ViewKey("lazily", lazily_view_key(dialect, self.kind))
        try:
            hub.check_stream(view, remote.session_id)
        except OctosyncError as exc:
            raise HandshakeFailed(exc.message, path="session_id") from exc
        publish = "publish" in remote.features
        hub.check_join(identity, remote.session_id, publish=publish)  # refused in place of a reply
        if not publish:
            self.rt.follow_map(remote.session_id)  # a TopGun map's view starts on demand
        hub.connect(self.conn, view, grants=identity, wake=self.rt.flusher.wake)
        self.identity, self.dialect, self.max_frame = identity, dialect, max_frame
        self.stream = remote.session_id
        self.life.move("handshake_publish" if publish else "handshake_subscribe")
        reply = server_handshake(remote.session_id, max_frame, dialect.name)
        hub.send_control(self.conn, self.frame(dialect.encode_handshake(reply)))
        if not publish:
            hub.subscribe(self.conn, self.stream)
        elif DURABLE_ACKS in remote.features and self.rt.writer is not None:
            self.rt.durable_listeners[self.conn] = self._durable

    def _durable(self, stream: object, epoch: int) -> None:
        """The journal holds this producer's frames through ``epoch``."""
        ack = self.dialect.codec.encode(OutboxAck(through_epoch=epoch))
        self.rt.hub.send_control(self.conn, self.frame(ack))

    def _produce(self, msg: IpcMessage, data: bytes) -> None:
        """What a producer may send: snapshots and deltas of its stream."""
        if not isinstance(msg, Snapshot | Delta):
            what = (
                "the producer has nothing to resync from"
                if isinstance(msg, ResyncRequest)
                else f"{type(msg).__name__} is not served on this face"
            )
            raise Forbidden(what, path="type")
        self.rt.hub.publish(
            self.conn, self.stream, lazily_frame(msg, Sent(self.dialect.name, data))
        )

    def _subscribe(self, msg: IpcMessage) -> None:
        """What a subscriber may send: resync requests and cell_set writes."""
        hub = self.rt.hub
        match msg:
            case ResyncRequest():
                hub.resync(self.conn, self.stream)
            case Snapshot():
                raise ForbiddenPublish(
                    "this connection subscribed; only a 'publish' connection may publish",
                    path="type",
                )
            case Delta(ops=ops):
                bad = [i for i, op in enumerate(ops) if not isinstance(op, CellSet)]
                if bad or not ops:
                    raise Forbidden(
                        "a subscriber may only send cell_set writes",
                        path=f"ops[{bad[0]}]" if bad else "ops",
                    )
                hub.write(self.conn, self.stream, msg)
            case _:
                raise Forbidden(f"{type(msg).__name__} is not served on this face", path="type")


def open_ws_session(rt: Runtime, conn: int, identity: ClaimGrants) -> LazilySession:
    return LazilySession(rt, conn, "ws", identity)


def open_tcp_session(rt: Runtime, conn: int) -> LazilySession:
    return LazilySession(rt, conn, "tcp", None)


__all__ = ["LazilySession", "open_tcp_session", "open_ws_session", "server_handshake"]
