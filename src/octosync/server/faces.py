"""The face registry: one frozen declaration per face, and everything derived from it.

A face is what a peer speaks: its route (or TCP port), how its credentials arrive, the session
that turns its frames into core calls, its codec in ``wire/``, the claim tables its grants
come from, whether it takes permessage-deflate, and what the inspector lists of it. ``FACES``
lists them; from it come the app's routes (``mount``), the TCP listeners (``server.run``), the
inspector's listings (``server.inspect``), the counters and metric labels (``server.runtime``,
``server.metrics``), the claim tables the token parser reads (``face_names.CLAIM_TABLES``,
held equal by a test) and the ``octosync serve`` banner (``serving_line``). Adding a face is
one ``Face(...)`` here (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aiohttp import web

from octosync.errors import Forbidden, Unauthorized
from octosync.server import lazily_socket, topgun_http, wvp_socket
from octosync.server.auth import ClaimGrants
from octosync.server.config import ServerConfig
from octosync.server.connection import (
    RUNTIME,
    AnySession,
    StreamFramer,
    refuse,
    request_identity,
    serve_ws,
    serve_ws_in_band,
)
from octosync.server.dataspace_session import DataspaceSession
from octosync.server.dataspace_state import dataspace_state
from octosync.server.face_names import (
    COUNTERS,
    LOCKS,
    MAPS,
    ROOMS,
    STREAMS,
    TOPICS,
    YJS,
    FaceName,
    GrantTable,
)
from octosync.server.face_state import FaceState
from octosync.server.lazily_session import LazilySession
from octosync.server.lazily_state import lazily_state
from octosync.server.listings import (
    dataspace_rows,
    document_rows,
    map_rows,
    stream_rows,
    yjs_rows,
)
from octosync.server.runtime import Runtime
from octosync.server.signal_session import SignalSession
from octosync.server.signal_state import signal_state
from octosync.server.token_exchange import TokenExchange
from octosync.server.topgun_session import TopGunSession
from octosync.server.topgun_state import topgun_state
from octosync.server.unix_listen import UnixListener
from octosync.server.wvp_session import WvpSession
from octosync.server.yjs_face import yjs_face
from octosync.server.yjs_session import HocuspocusSession, YWebsocketSession
from octosync.wire.framing import FrameDecoder
from octosync.wire.syndicate import PacketStream

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Credentials = Literal["upgrade", "in_band"]
"""``upgrade``: the JWT comes with the HTTP upgrade (401 without it); ``in_band``: the face's
own first frames carry it (TopGun's ``AUTH``, lazily-over-TCP's ``auth:`` feature)."""


Query = Mapping[str, str]
SessionOpener = Callable[[Runtime, int, ClaimGrants | None, Query], AnySession]
"""A face's session for one connection: the runtime, the connection id, the identity the
upgrade proved (None when credentials come in-band) and the upgrade's query (``?session=``)."""


Listing = Callable[[Runtime, ClaimGrants], list[dict[str, object]]]


@dataclass(frozen=True, slots=True)
class TcpListener:
    """A face's plain-TCP port: the config field that holds it, the option that sets it, the
    framing of its byte stream, and the banner's words for it."""

    port: Callable[[ServerConfig], int | None]
    option: str
    framer: Callable[[int], StreamFramer]
    label: str
    open: SessionOpener
    """The session of one TCP connection (its identity comes in-band)."""


@dataclass(frozen=True, slots=True)
class UnixSocket:
    """A face served on a Unix socket file: the config field that names it, the listener
    that serves it there, and the banner's words for it."""

    path: Callable[[ServerConfig], str | None]
    listen: Callable[[Runtime, Path], Awaitable[UnixListener]]
    label: str


@dataclass(frozen=True, slots=True)
class Face:
    """One face, declared once."""

    name: FaceName
    """Counters key and metric label (``octosync_connections{face=...}``)."""
    open: SessionOpener
    """The session for one connection: ``open(rt, conn, identity, query)``."""
    codec: str
    """The ``wire/`` module that encodes and decodes its frames (imported by a test)."""
    grants: tuple[GrantTable, ...]
    """The token's claim tables its rules read."""
    route: str | None = None
    """Its WebSocket path on the HTTP port; None: TCP only."""
    credentials: Credentials = "upgrade"
    deflate: bool = False
    """Takes a client's permessage-deflate offer (``server_no_context_takeover``)."""
    tcp: TcpListener | None = None
    unix: UnixSocket | None = None
    mount: Callable[[web.Application, ServerConfig], None] | None = None
    """Mounts a face whose route depends on the configuration (``/chain/{name}``); None: its
    ``route`` with the shared WebSocket loop."""
    state: Callable[[Runtime], FaceState] | None = None
    """Its per-server state (its core, documents, relay), made once per runtime: the app
    builds it before the port opens and calls its hooks (restore from the journal, cluster
    links, ``/metrics``, the tick, shutdown; ``server.face_state``)."""
    listings: tuple[tuple[str, Listing], ...] = ()
    """Its keys in the inspector's ``/api/streams``, each with the rows one identity may see."""

    def handler(self) -> Handler:
        """The aiohttp handler of its route: the shared WebSocket loop with this session."""
        opener = self.open
        deflate = self.deflate
        if self.credentials == "in_band":

            async def in_band(request: web.Request) -> web.StreamResponse:
                query = request.query
                return await serve_ws_in_band(
                    request, lambda rt, conn: opener(rt, conn, None, query), deflate=deflate
                )

            return in_band

        async def upgrade(request: web.Request) -> web.StreamResponse:
            query = request.query
            return await serve_ws(
                request,
                lambda rt, conn, identity: opener(rt, conn, identity, query),
                deflate=deflate,
            )

        return upgrade


def _lazily_ws(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    return LazilySession(lazily_state(rt), conn, "ws", identity)


def _lazily_tcp(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    return LazilySession(lazily_state(rt), conn, "tcp", None)


def _wvp(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    assert identity is not None
    return WvpSession(rt, conn, identity)


def _signal(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    assert identity is not None
    return SignalSession(signal_state(rt), conn, identity, query.get("session", "default"))


def _dataspace_ws(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    return DataspaceSession(dataspace_state(rt), conn, "ws", identity)


def _dataspace_tcp(
    rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query
) -> AnySession:
    return DataspaceSession(dataspace_state(rt), conn, "tcp", None)


def _topgun(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    return TopGunSession(topgun_state(rt).face, conn)


def _mount_topgun(app: web.Application, config: ServerConfig) -> None:
    """``/topgun``, TopGun's HTTP sync (``POST /topgun/sync``) and its token exchange
    (``/api/auth/token``, ``/api/auth/refresh``)."""
    app.router.add_get("/topgun", BY_NAME[FaceName.TOPGUN].handler())
    app.router.add_post(topgun_http.PATH, topgun_http.handler(app[RUNTIME]))
    TokenExchange(config.auth, config.data_dir).mount(app)


def _mount_chain(app: web.Application, config: ServerConfig) -> None:
    """``/chain/{name}``, only with ``--chain-config`` (it imports NATS only then)."""
    if config.chain_config is not None:
        from octosync.server.chain_face import add_routes

        add_routes(app, config.chain_config, config.auth)


def _chain(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    raise TypeError("/chain/NAME sessions are opened by the chain relay (server.chain_face)")


def _hocuspocus(rt: Runtime, conn: int, identity: ClaimGrants | None, query: Query) -> AnySession:
    return HocuspocusSession(yjs_face(rt), rt, conn)


async def _y_websocket(request: web.Request) -> web.StreamResponse:
    """``/yjs/NAME``: one document, credentials with the upgrade; no read grant is a 403 (a
    refusal the browser can read), as no token is a 401."""
    name = request.match_info["name"]
    try:
        identity = request_identity(request.app[RUNTIME], request)
    except Unauthorized as err:
        return refuse(401, err)
    if not identity.may(YJS, name, "read"):
        return refuse(403, Forbidden(f"no read grant on document {name!r}", path="yjs"))
    return await serve_ws(
        request, lambda rt, conn, who: YWebsocketSession(yjs_face(rt), rt, conn, who, name)
    )


def _mount_yjs(app: web.Application, config: ServerConfig) -> None:
    """Hocuspocus on ``/yjs`` (credentials in-band), y-websocket on ``/yjs/NAME``."""
    app.router.add_get("/yjs", BY_NAME[FaceName.YJS].handler())
    app.router.add_get("/yjs/{name:.+}", _y_websocket)


def _streams(rt: Runtime, identity: ClaimGrants) -> list[dict[str, object]]:
    return stream_rows(rt.hub, identity)


def _documents(rt: Runtime, identity: ClaimGrants) -> list[dict[str, object]]:
    return document_rows(lazily_state(rt).plane.core, identity)


def _maps(rt: Runtime, identity: ClaimGrants) -> list[dict[str, object]]:
    return map_rows(topgun_state(rt).core.maps.store, identity)


def _yjs_documents(rt: Runtime, identity: ClaimGrants) -> list[dict[str, object]]:
    return yjs_rows(yjs_face(rt).core, identity)


def _dataspaces(rt: Runtime, identity: ClaimGrants) -> list[dict[str, object]]:
    return dataspace_rows(dataspace_state(rt).started_relay(), identity)


FACES: tuple[Face, ...] = (
    Face(
        FaceName.LAZILY,
        _lazily_ws,
        "wire.lazily_dialects",
        (STREAMS,),
        route="/lazily",
        state=lazily_state,
        listings=(("streams", _streams), ("documents", _documents)),
    ),
    Face(
        FaceName.TCP,
        _lazily_tcp,
        "wire.lazily_dialects",
        (STREAMS,),
        credentials="in_band",
        tcp=TcpListener(
            lambda c: c.tcp_port, "--tcp-port", FrameDecoder, "lazily over TCP", _lazily_tcp
        ),
        unix=UnixSocket(lambda c: c.lazily_socket, lazily_socket.listen, "lazily"),
    ),
    Face(
        FaceName.WVP,
        _wvp,
        "wire.wvp",
        (STREAMS,),
        route="/wvp",
        unix=UnixSocket(lambda c: c.wvp_socket, wvp_socket.listen, "WVP"),
    ),
    Face(
        FaceName.SIGNAL,
        _signal,
        "signaling.messages",
        (ROOMS,),
        route="/signal",
        state=signal_state,
    ),
    Face(
        FaceName.DATASPACE,
        _dataspace_ws,
        "wire.syndicate",
        (STREAMS,),
        route="/dataspace",
        state=dataspace_state,
        listings=(("dataspaces", _dataspaces),),
        tcp=TcpListener(
            lambda c: c.dataspace_port,
            "--dataspace-port",
            PacketStream,
            "dataspace over TCP",
            _dataspace_tcp,
        ),
    ),
    Face(
        FaceName.TOPGUN,
        _topgun,
        "wire.topgun",
        (MAPS, TOPICS, LOCKS, COUNTERS),
        route="/topgun",
        credentials="in_band",
        deflate=True,
        mount=_mount_topgun,
        state=topgun_state,
        listings=(("maps", _maps),),
    ),
    Face(FaceName.CHAIN, _chain, "wire.chain", (STREAMS,), mount=_mount_chain),
    Face(
        FaceName.YJS,
        _hocuspocus,
        "yjs.messages",
        (YJS,),
        route="/yjs",
        credentials="in_band",
        mount=_mount_yjs,
        state=yjs_face,
        listings=(("yjs", _yjs_documents),),
    ),
)
"""Every face, in the order the banner names them."""

BY_NAME: Mapping[FaceName, Face] = {face.name: face for face in FACES}


def mount(app: web.Application, config: ServerConfig) -> None:
    """Add every face's WebSocket route to ``app``."""
    for face in FACES:
        if face.mount is not None:
            face.mount(app, config)
        elif face.route is not None:
            app.router.add_get(face.route, face.handler())


def serving_line(
    config: ServerConfig,
    port: int,
    tcp_ports: Mapping[FaceName, int],
    unix_sockets: Mapping[FaceName, Path] | None = None,
) -> str:
    """What ``octosync serve`` prints once every port and socket file is bound."""
    routes = " ".join(face.route for face in FACES if face.route is not None)
    faces = f"{routes} /metrics /healthz, the inspector at /"
    if config.chain_config is not None:
        faces += f", /chain/NAME (chains configured at {config.chain_config})"
    tls = " with TLS" if config.tls_cert is not None else ""
    tcp = "".join(
        f", {face.tcp.label}{tls} on {config.host}:{tcp_ports[face.name]}"
        for face in FACES
        if face.tcp is not None and face.name in tcp_ports
    )
    http = "https" if config.tls_cert is not None else "http"
    where = f"{http}://{config.host}:{port}{tcp}"
    line = f"octosync serving {faces} on {where} (data in {config.data_dir})"
    for face in FACES:
        path = None if unix_sockets is None else unix_sockets.get(face.name)
        if face.unix is not None and path is not None:
            line += f"; {face.unix.label} on the Unix socket {path}"
    return line
