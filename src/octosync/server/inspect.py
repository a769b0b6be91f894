"""The browser side of the server: the JavaScript client, the live inspector and its JSON.

``GET /client/octosync.js`` serves the client module shipped inside the package (so ``pip
install`` brings it); ``GET /`` is the inspector page built on it; ``GET /api/streams`` lists
the streams a token may read, with what the hub knows of each, and beside them the other faces'
state: the TopGun maps the token may read and the dataspaces it may use (``publish`` on
``dataspace:NAME``, as the dataspace face requires). The server hosts no chains (``octosync
chain`` runs its own links), so there are none to list. The listing is the only thing here
that reveals state, so it takes credentials exactly like a WebSocket upgrade
(``Authorization: Bearer`` or ``?token=``; 401 with the typed error without them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib.resources import files

from aiohttp import web

from octosync.crdt.fold import MapStore
from octosync.errors import Unauthorized
from octosync.hub import Hub
from octosync.hub.streams import stream_face
from octosync.server.auth import ClaimGrants
from octosync.server.connection import RUNTIME, refuse, request_identity
from octosync.server.dataspace_session import DATASPACE_GRANT_PREFIX
from octosync.syndicate import Relay

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


def stream_rows(hub: Hub, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per stream ``identity`` may read: what the inspector shows, sorted by name."""
    rows: list[dict[str, object]] = []
    for stream in hub.stream_ids():
        if not identity.allows(stream, "read"):
            continue
        rows.append(
            {
                "stream": str(stream),
                "face": stream_face(stream),
                "producer": hub.producer_of(stream),
                "epoch": hub.epoch_of(stream),
                "subscribers": len(hub.subscribers_of(stream)),
                "backlog": hub.backlog_of(stream),
                "frames": hub.frames_accepted_of(stream),
            }
        )
    rows.sort(key=lambda row: str(row["stream"]))
    return rows


def map_rows(store: MapStore, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per TopGun map ``identity`` may read: live keys and tombstones, by name."""
    rows: list[dict[str, object]] = []
    for name in store.maps():
        if not identity.may_map(name, "read"):
            continue
        live = dead = 0
        for row in store.rows(name):
            dead += row.tombstone
            live += not row.tombstone
        rows.append({"map": name, "keys": live, "tombstones": dead})
    return rows


def dataspace_rows(relay: Relay | None, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per dataspace ``identity`` may use (assertions and observers), by name; none
    before the dataspace face's first use."""
    if relay is None:
        return []
    return [
        {"dataspace": name, "assertions": len(ds.handles), "observers": len(ds.observers)}
        for name, ds in sorted(relay.dataspaces.items())
        if identity.allows(f"{DATASPACE_GRANT_PREFIX}{name}", "publish")
    ]


async def streams(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    try:
        identity = request_identity(rt, request)
    except Unauthorized as err:
        return refuse(401, err)
    return web.json_response(
        {
            "streams": stream_rows(rt.hub, identity),
            "connections": rt.hub.connection_count(),
            "maps": map_rows(rt.topgun.maps.store, identity),
            "dataspaces": dataspace_rows(rt.started_relay(), identity),
        },
        headers={"Cache-Control": "no-store"},
    )


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
