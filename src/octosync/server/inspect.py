"""The browser side of the server: the JavaScript client, the live inspector and its JSON.

``GET /client/octosync.js`` serves the client module shipped inside the package (so ``pip
install`` brings it); ``GET /`` is the inspector page built on it; ``GET /api/streams`` has
one listing per face that declares one (``server.faces``, rows from ``server.listings``): the
streams a token may read, with what the hub knows of each, the TopGun maps it may read and the
dataspaces it may use. The server hosts no chains (``octosync
chain`` runs its own links), so there are none to list. The listing is the only thing here
that reveals state, so it takes credentials exactly like a WebSocket upgrade
(``Authorization: Bearer`` or ``?token=``; 401 with the typed error without them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib.resources import files

from aiohttp import web

from octosync.errors import Unauthorized
from octosync.server.connection import RUNTIME, refuse, request_identity
from octosync.server.faces import FACES

STATIC = files("octosync.server") / "static"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ASSETS = {
    "/client/octosync.js": ("octosync.js", "text/javascript"),
    "/inspector.js": ("inspector.js", "text/javascript"),
    "/": ("inspector.html", "text/html"),
}


@cache
def asset(name: str) -> bytes:
    """A file shipped in ``octosync/server/static`` (read once per process)."""
    return (STATIC / name).read_bytes()


async def streams(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    try:
        identity = request_identity(rt, request)
    except Unauthorized as err:
        return refuse(401, err)
    body: dict[str, object] = {"connections": rt.hub.connection_count()}
    for face in FACES:
        for key, rows in face.listings:
            body[key] = rows(rt, identity)
    return web.json_response(body, headers={"Cache-Control": "no-store"})


PUBLIC_MODULES = frozenset({"octosync.js"})
"""Importable from pages of any origin (a module import is a CORS request): the client is
public code, and what it may do is decided by the token it connects with, not by its origin."""


def _static(name: str, content_type: str) -> Handler:
    headers = {"Cache-Control": "no-cache"}
    if name in PUBLIC_MODULES:
        headers["Access-Control-Allow-Origin"] = "*"

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=asset(name), content_type=content_type, charset="utf-8", headers=headers
        )

    return handler


def add_routes(app: web.Application) -> None:
    for path, (name, content_type) in ASSETS.items():
        app.router.add_get(path, _static(name, content_type))
    app.router.add_get("/api/streams", streams)
