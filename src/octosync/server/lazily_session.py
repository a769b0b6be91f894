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
from octosync.hub.crdt_streams import FEATURE as PLANE_FEATURE
from octosync.hub.model import Sent
from octosync.hub.node_views import NodeView
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION, negotiate
from octosync.ipc.messages import (
    CellSet,
    CrdtSync,
    Delta,
    Handshake,
    IpcMessage,
    OutboxAck,
    RemoteOp,
    RemoteOpResult,
    ResyncRequest,
    Snapshot,
)
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.lifecycle import Lifecycle
from octosync.server.plane import Framing
from octosync.server.ports import LazilyPort
from octosync.server.shared_blobs import SessionBlobs
from octosync.server.view_encoders import lazily_view_key
from octosync.shm.region import SHARED_BLOB
from octosync.wire.framing import encode_frame
from octosync.wire.lazily_dialects import (
    SEED_JSON,
    FaceDialect,
    handshake_dialect,
    sniff_producer_dialect,
)
from octosync.wire.websocket import ws_frame

PROTOCOL_MAJOR = PROTOCOL_MAJOR_VERSION
SERVER_FEATURES = (
    "publish",
    "resync_request",
    "cell_set_write",
    "outbox_ack",
    SHARED_BLOB,
    PLANE_FEATURE,
    "remote_op",
)
REMOTE_OPS = "remote_op"
"""Writers may send ``RemoteOp`` (answered by ``RemoteOpResult``); a producer that offers it
gets each write and effect request stamped with the writer's connection and subject, and
answers them (``RemoteOpResult`` with ``peer``, relayed to that writer alone)."""
DURABLE_ACKS = "outbox_ack"
"""A producer that offers this feature gets ``OutboxAck {through_epoch}`` once its frames
through that epoch are committed to the journal: what it must keep to resend after a crash."""
TOKEN_FEATURE = "auth:"
"""A client that cannot send headers (plain TCP) may carry its JWT as feature ``auth:<jwt>``."""

Transport = Literal["ws", "tcp"]


def server_handshake(
    session_id: str, max_frame_size: int, codec: str = "json", extra: tuple[str, ...] = ()
) -> Handshake:
    """The server's side of the handshake; it hosts whatever session the peer names
    (``extra``: features for this session only, such as its shared-memory region)."""
    return Handshake(
        protocol_id=PROTOCOL_ID,
        protocol_major_version=PROTOCOL_MAJOR,
        codec=codec,
        max_frame_size=max_frame_size,
        fragmentation_supported=False,
        ordered_reliable=True,
        peer_id=0,
        session_id=session_id,
        features=SERVER_FEATURES + extra,
    )


class State(Enum):
    AWAIT_HANDSHAKE = 1
    PRODUCING = 2
    SUBSCRIBED = 3
    PLANE = 4
    CLOSED = 5


LIFECYCLE: dict[tuple[State, str], State] = {
    (State.AWAIT_HANDSHAKE, "handshake_publish"): State.PRODUCING,
    (State.AWAIT_HANDSHAKE, "handshake_subscribe"): State.SUBSCRIBED,
    (State.AWAIT_HANDSHAKE, "handshake_plane"): State.PLANE,
    (State.AWAIT_HANDSHAKE, "close"): State.CLOSED,
    (State.PLANE, "close"): State.CLOSED,
    (State.PRODUCING, "close"): State.CLOSED,
    (State.SUBSCRIBED, "close"): State.CLOSED,
}
"""The lazily connection's lifecycle: one handshake decides the role for good (``PLANE``: a
member of a multi-writer CRDT plane stream, negotiated by the ``distributed_crdt`` feature)."""


class LazilySession:
    """The lazily face's protocol object: bytes in, hub calls and error frames out.

    It never touches a socket: frames for the peer go through the hub (``send_control``) once
    the handshake registered it, and into ``outgoing`` before that, for the loop to write.
    """

    offload_decode = False
    """msgspec decodes even a frame at the limit in a few milliseconds."""

    def __init__(
        self, runtime: LazilyPort, conn: int, kind: Transport, identity: ClaimGrants | None
    ) -> None:
        self.rt = runtime
        self.conn = conn
        self.kind = kind
        self.identity = identity
        self.life = Lifecycle(LIFECYCLE, State.AWAIT_HANDSHAKE)
        self.dialect: FaceDialect = SEED_JSON
        self.sniffed = False
        self.stream = ""
        self.max_frame = runtime.max_frame
        self.face = FaceName.TCP if kind == "tcp" else FaceName.LAZILY
        self.byte_stream = kind == "tcp"
        self.outgoing: list[bytes] = []
        self.blobs = SessionBlobs(runtime.blobs)
        self.view_name = "all"
        """The permission view: ``all``, or the ``nodes`` rules of the token on this stream."""

    @property
    def ready(self) -> bool:
        return self.life.state is not State.AWAIT_HANDSHAKE

    # --- Session --------------------------------------------------------------------------

    def decode(self, data: bytes) -> bytes:
        return data  # the dialect is chosen by the handshake and the first frame: see handle

    def handle(self, message: bytes) -> None:
        state = self.life.state
        if state is State.AWAIT_HANDSHAKE:
            self._handshake(message)
            return
        if state is State.PLANE:
            self._plane(message)
            return
        if state is State.PRODUCING and not self.sniffed:
            self.sniffed = True
            sniffed = sniff_producer_dialect(self.dialect, message)
            if sniffed is not self.dialect:
                self.dialect = sniffed
                self.rt.hub.change_view(
                    self.conn,
                    ViewKey("lazily", lazily_view_key(sniffed, self.kind), self.view_name),
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
        self.rt.plane.leave(self.conn)
        self.rt.durable_listeners.pop(self.conn, None)
        self.rt.hub.disconnect(self.conn)
        self.blobs.close()

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
                identity = self.rt.authenticate(feature[len(TOKEN_FEATURE) :])
        if identity is None:
            identity = self.rt.authenticate(None)
        hub = self.rt.hub
        publish = "publish" in remote.features
        try:
            hub.check_stream(
                ViewKey("lazily", lazily_view_key(dialect, self.kind)), remote.session_id
            )
        except OctosyncError as exc:
            raise HandshakeFailed(exc.message, path="session_id") from exc
        if PLANE_FEATURE in remote.features:
            plane_view = ViewKey("lazily", lazily_view_key(dialect, self.kind))
            self._join_plane(remote, dialect, identity, plane_view, max_frame)
            return
        if remote.session_id in self.rt.plane.core.streams:
            raise HandshakeFailed(
                f"stream {remote.session_id!r} is a multi-writer stream: join it with the "
                f"{PLANE_FEATURE!r} feature",
                path="session_id",
            )
        hub.check_join(identity, remote.session_id, publish=publish)  # refused in place of a reply
        try:
            extra = self.blobs.negotiate(remote.features, publish=publish)
        except OctosyncError as exc:
            raise HandshakeFailed(exc.message, path="features") from exc
        rules = None if publish else identity.node_rules(remote.session_id)
        if rules is not None:
            self.view_name = rules.view_name
            hub.register_view(self.view_name, lambda: NodeView(rules), overwrite=False)
        view = ViewKey(
            "lazily",
            lazily_view_key(dialect, self.kind) + self.blobs.view_suffix(publish=publish),
            self.view_name,
        )
        if not publish:
            self.rt.follow_stream(remote.session_id)  # a TopGun map's view starts on demand
        hub.connect(self.conn, view, grants=identity, wake=self.rt.wake)
        if publish and REMOTE_OPS in remote.features:
            hub.take_remote_ops(self.conn)
        self.identity, self.dialect, self.max_frame = identity, dialect, max_frame
        self.stream = remote.session_id
        self.life.move("handshake_publish" if publish else "handshake_subscribe")
        reply = server_handshake(remote.session_id, max_frame, dialect.name, extra)
        hub.send_control(self.conn, self.frame(dialect.encode_handshake(reply)))
        if not publish:
            hub.subscribe(self.conn, self.stream)
        elif DURABLE_ACKS in remote.features and self.rt.journaled:
            self.rt.durable_listeners[self.conn] = self._durable

    def _durable(self, stream: object, epoch: int) -> None:
        """The journal holds this producer's frames through ``epoch``."""
        ack = self.dialect.codec.encode(OutboxAck(through_epoch=epoch))
        self.rt.hub.send_control(self.conn, self.frame(ack))

    def _join_plane(
        self,
        remote: Handshake,
        dialect: FaceDialect,
        identity: ClaimGrants,
        view: ViewKey,
        max_frame: int,
    ) -> None:
        """Join a multi-writer stream: the reply, then the whole state (with ``read``)."""
        hub, name = self.rt.hub, remote.session_id
        if hub.epoch_of(name) is not None or hub.producer_of(name) is not None:
            raise HandshakeFailed(
                f"stream {name!r} is a single-writer stream with a producer's state",
                path="session_id",
            )
        state = self.rt.plane.core.join(self.conn, name, remote.peer_id, identity)
        hub.connect(self.conn, view, grants=identity, wake=self.rt.wake)
        self.identity, self.dialect, self.max_frame, self.stream = (
            identity,
            dialect,
            max_frame,
            name,
        )
        self.life.move("handshake_plane")
        reply = server_handshake(name, max_frame, dialect.name)
        hub.send_control(self.conn, self.frame(dialect.encode_handshake(reply)))
        self.rt.plane.join(self.conn, name, self._framing(), state)

    def _framing(self) -> Framing:
        dialect = self.dialect
        return Framing(f"{dialect.name}/{self.kind}", lambda sync: self.frame(dialect.encode(sync)))

    def _plane(self, message: bytes) -> None:
        """A plane member sends CrdtSync frames only. A member whose handshake said ``json``
        but who speaks the tagged shape (lazily-spec peers) is switched, and gets the state
        again in its own dialect."""
        if not self.sniffed:
            self.sniffed = True
            sniffed = sniff_producer_dialect(self.dialect, message)
            if sniffed is not self.dialect:
                self.dialect = sniffed
                view = ViewKey("lazily", lazily_view_key(sniffed, self.kind))
                self.rt.hub.change_view(self.conn, view)
                plane = self.rt.plane
                state = plane.core.state_of(self.stream)
                plane.join(self.conn, self.stream, self._framing(), state)
        msg = self.dialect.decode(message)
        if not isinstance(msg, CrdtSync):
            raise Forbidden(
                f"a multi-writer stream takes CrdtSync frames, not {type(msg).__name__}",
                path="type",
            )
        self.rt.plane.receive(self.conn, msg)

    def _produce(self, msg: IpcMessage, data: bytes) -> None:
        """What a producer may send: snapshots and deltas of its stream, and its answers to
        writers' requests."""
        if isinstance(msg, RemoteOpResult):
            self.rt.hub.answer(self.conn, self.stream, msg)
            return
        if not isinstance(msg, Snapshot | Delta):
            what = (
                "the producer has nothing to resync from"
                if isinstance(msg, ResyncRequest)
                else f"{type(msg).__name__} is not served on this face"
            )
            raise Forbidden(what, path="type")
        msg, inlined = self.blobs.inbound(msg)
        sent = None if inlined else Sent(self.dialect.name, data)  # journal bytes, not refs
        self.rt.hub.publish(self.conn, self.stream, lazily_frame(msg, sent))

    def _subscribe(self, msg: IpcMessage) -> None:
        """What a subscriber may send: resync requests, cell_set writes and ``RemoteOp``s."""
        hub = self.rt.hub
        match msg:
            case ResyncRequest():
                hub.resync(self.conn, self.stream)
            case RemoteOp():
                self._remote_op(msg)
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
                hub.write(self.conn, self.stream, self.blobs.inbound(msg)[0], self._subject)
            case _:
                raise Forbidden(f"{type(msg).__name__} is not served on this face", path="type")

    @property
    def _subject(self) -> str | None:
        """Who writes, as the token says (None for anonymous ``--insecure-dev`` access)."""
        return self.identity.subject or None if self.identity else None

    def _remote_op(self, op: RemoteOp) -> None:
        """Check and forward a writer's request; one with a ``request`` id is answered by a
        ``RemoteOpResult`` whatever happens (a refusal here, the producer's answer, or
        ``applied=False`` when the producer takes only the older ``cell_set`` form)."""
        try:
            if op.peer is not None or op.subject is not None:
                raise Forbidden(
                    "peer and subject are set by the server, not the writer", path="peer"
                )
            if self.rt.hub.remote_op(self.conn, self.stream, op, self._subject):
                return
            result = RemoteOpResult(op.request, applied=False)
        except OctosyncError as err:
            if not op.request:
                raise
            result = RemoteOpResult(op.request, error=err.name, message=err.message[:1024])
        if op.request:
            self.rt.hub.send_control(self.conn, self.frame(self.dialect.encode(result)))


__all__ = ["LazilySession", "server_handshake"]
