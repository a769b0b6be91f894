"""One lazily connection, whatever carries it (WebSocket messages or u32 TCP frames).

Handshake first and fail closed; the handshake's ``session_id`` names the stream; ``publish``
in its features makes the connection the producer; everyone else subscribes. A peer that may
not do what it asks (no grant, or the stream has another producer) gets the refusal in place
of the handshake reply. The connection
loops of ``server.connection`` feed it frames and close it as ``hub.policy`` says.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from octosync.errors import (
    DecodeError,
    Forbidden,
    ForbiddenPublish,
    HandshakeFailed,
    OctosyncError,
)
from octosync.hub import ViewKey, lazily_frame
from octosync.ipc.handshake import PROTOCOL_ID, PROTOCOL_MAJOR_VERSION, negotiate
from octosync.ipc.messages import (
    CellSet,
    Delta,
    Handshake,
    IpcMessage,
    ResyncRequest,
    Snapshot,
)
from octosync.server.auth import ClaimGrants, authenticate
from octosync.server.framing import u32_frame, ws_frame
from octosync.server.lazily_dialect import (
    SEED_JSON,
    Dialect,
    handshake_dialect,
    sniff_producer_dialect,
)
from octosync.server.runtime import Runtime, lazily_dialect_key

PROTOCOL_MAJOR = PROTOCOL_MAJOR_VERSION
SERVER_FEATURES = ("publish", "resync_request", "cell_set_write")
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


class LazilySession:
    """The lazily face's protocol object (``server.connection.Session``)."""

    offload_decode = False
    """msgspec decodes even a frame at the limit in a few milliseconds."""

    def __init__(
        self,
        runtime: Runtime,
        conn: int,
        transport: asyncio.BaseTransport,
        kind: Transport,
        identity: ClaimGrants | None,
    ) -> None:
        self.rt = runtime
        self.conn = conn
        self.transport = transport
        self.kind = kind
        self.identity = identity
        self.dialect: Dialect | None = None
        self.sniffed = False
        self.stream: str | None = None
        self.producer = False
        self.max_frame = runtime.limits.max_frame_bytes
        self.face = "tcp" if kind == "tcp" else "lazily"
        self.byte_stream = kind == "tcp"

    @property
    def ready(self) -> bool:
        return self.dialect is not None

    # --- Session --------------------------------------------------------------------------

    def decode(self, data: bytes) -> object:
        return data  # the dialect is chosen by the handshake and the first frame: see handle

    def handle(self, message: object) -> None:
        assert isinstance(message, bytes)
        if self.dialect is None:
            self._handshake(message)
            return
        if self.producer and not self.sniffed:
            self.sniffed = True
            sniffed = sniff_producer_dialect(self.dialect, message)
            if sniffed is not self.dialect:
                self.dialect = sniffed
                self.rt.hub.change_view(self.conn, ViewKey(lazily_dialect_key(sniffed, self.kind)))
        self._message(self.dialect.decode(message))

    def error_frame(self, err: OctosyncError) -> bytes:
        dialect = self.dialect or SEED_JSON
        return self.frame(dialect.encode_error(err), dialect)

    def send_error(self, err: OctosyncError) -> None:
        data = self.error_frame(err)
        if self.dialect is not None:
            self.rt.hub.send_control(self.conn, data)
        else:
            self._write_direct(data)

    def close(self) -> None:
        self.rt.hub.disconnect(self.conn)

    # --- internals ------------------------------------------------------------------------

    def frame(self, data: bytes, dialect: Dialect) -> bytes:
        if self.kind == "tcp":
            return u32_frame(data)
        return ws_frame(data, text=dialect.text)

    def _write_direct(self, data: bytes) -> None:
        t = self.transport
        if isinstance(t, asyncio.WriteTransport) and not t.is_closing():
            t.write(data)

    def _handshake(self, data: bytes) -> None:
        try:
            dialect, remote = handshake_dialect(data)
        except DecodeError as exc:
            raise HandshakeFailed(
                f"first message must be a handshake: {exc.message}", path=exc.path
            ) from exc
        local = server_handshake(remote.session_id, self.max_frame, dialect.name)
        self.max_frame = negotiate(local, remote).max_frame_size
        for feature in remote.features:
            if feature.startswith(TOKEN_FEATURE):
                self.identity = authenticate(feature[len(TOKEN_FEATURE) :], self.rt.config.auth)
        if self.identity is None:
            self.identity = authenticate(None, self.rt.config.auth)
        hub = self.rt.hub
        view = ViewKey(lazily_dialect_key(dialect, self.kind))
        try:
            hub.check_stream(view, remote.session_id)
        except OctosyncError as exc:
            raise HandshakeFailed(exc.message, path="session_id") from exc
        producer = "publish" in remote.features
        hub.check_join(self.identity, remote.session_id, publish=producer)
        self.stream = remote.session_id
        self.producer = producer
        hub.connect(self.conn, view, grants=self.identity, wake=self.rt.flusher.wake)
        self.dialect = dialect
        reply = server_handshake(remote.session_id, self.max_frame, dialect.name)
        hub.send_control(self.conn, self.frame(dialect.encode_handshake(reply), dialect))
        if not self.producer:
            hub.subscribe(self.conn, self.stream)

    def _message(self, msg: IpcMessage) -> None:
        assert self.stream is not None
        hub = self.rt.hub
        if not isinstance(msg, Snapshot | Delta | ResyncRequest):
            raise Forbidden(f"{type(msg).__name__} is not served on this face", path="type")
        if self.producer:
            if isinstance(msg, ResyncRequest):
                raise Forbidden("the producer has nothing to resync from", path="type")
            hub.publish(self.conn, self.stream, lazily_frame(msg))
            return
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


def open_ws_session(
    rt: Runtime, conn: int, transport: asyncio.BaseTransport, identity: ClaimGrants
) -> LazilySession:
    return LazilySession(rt, conn, transport, "ws", identity)


def open_tcp_session(rt: Runtime, conn: int, transport: asyncio.BaseTransport) -> LazilySession:
    return LazilySession(rt, conn, transport, "tcp", None)


__all__ = ["LazilySession", "open_tcp_session", "open_ws_session", "server_handshake"]
