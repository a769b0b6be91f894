"""``/chain/{name}``: devices over WebSocket (browsers), relayed to the chain's head over TCP.

The device state machine lives in the browser; this face only translates. Each WebSocket
text message is a ``DeviceToHead`` record in the seed's JSON (``{"Type":
"BootstrapChainRequest", "NextDeviceSequencer": 1, "Events": {}}``), decoded strictly; each
``HeadToDevice`` record from the head goes back as JSON text. The first message must be the
bootstrap request. Identity follows the other faces: a bearer token (``?token=`` or
``Authorization``) whose ``sub`` is the device name and which grants ``publish`` on stream
``chain/{name}``; with ``--insecure-dev`` an anonymous device names itself with ``?device=``.

A chain nobody started is not created by asking for it: the face opens only existing
configurations (the WebSocket closes with 1013, try again later), and a name that cannot be a
chain's is 404 before the upgrade.

When the head fails, the TCP connection drops and the WebSocket is closed with 1012 (service
restart): the browser reconnects and bootstraps with the new head, as the protocol expects.
The WebSocket itself is served by the shared loop of ``server.connection`` (session:
``server.chain_session``), so limits, budgets, token expiry and the shutdown drain apply.

With a journal (``serve`` without ``--no-journal``) the face journals what it relays, for the
pipeline: each device event before it goes to the head (``ChainEventSeen``; the record reaches
the head only after the commit, so no event the chain took through this face is missing from
the journal), and each state change the head sends its devices, once per sequencer
(``ChainStateSeen``; not waited for, like the hub's fan-out). Events of devices that reach the
head directly over TCP are the chain's own business and appear only through the state changes
that consume them.

Wiring: ``add_routes(app, config_url, auth)`` adds the route to any aiohttp application;
``octosync serve --chain-config nats://HOST:PORT`` mounts it on the server (``server/faces.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable

import msgspec
from aiohttp import web

from octosync.chain.records import DeviceEvent, HeadToDevice, StateUpdate
from octosync.errors import OctosyncError, Unauthorized
from octosync.links import frames
from octosync.links.config_store import ConfigStore
from octosync.server.auth import AuthConfig, ClaimGrants, authenticate, bearer_token
from octosync.server.chain_session import ChainSession
from octosync.server.connection import serve_ws
from octosync.server.runtime import Runtime
from octosync.store.commit_path import Commit
from octosync.store.records import ChainEventSeen, ChainStateSeen, encode_record
from octosync.wire import chain_link
from octosync.wire.chain import ChainCodec
from octosync.wire.websocket import ws_frame

TO_DEVICE: ChainCodec[HeadToDevice] = ChainCodec(HeadToDevice, "json")
CLOSE_RESTART = 1012
CLOSE_POLICY = 1008
CLOSE_UNAVAILABLE = 1013
CHAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a chain's NATS buckets (``chain_<name>``) can be named."""


class ChainFace:
    def __init__(self, config_url: str, auth: AuthConfig) -> None:
        self.config_url = config_url
        self.auth = auth
        self._stores: dict[str, ConfigStore] = {}
        self.states_journaled: dict[str, int] = {}
        """Per chain, the highest state sequencer journaled (every device gets each one)."""

    async def _configs(self, chain: str) -> ConfigStore:
        store = self._stores.get(chain)
        if store is None:
            store = await ConfigStore(self.config_url, chain).open(create=False)
            self._stores[chain] = store
        return store

    async def close(self) -> None:
        for store in self._stores.values():
            await store.close()

    def device_name(self, request: web.Request, chain: str) -> str:
        token = bearer_token(request.headers.get("Authorization"), request.query.get("token"))
        grants = authenticate(token, self.auth)
        if grants.everything:
            name = request.query.get("device", "")
            if not name:
                raise Unauthorized("an anonymous device names itself with ?device=")
            return name
        if not grants.allows(f"chain/{chain}", "publish"):
            raise Unauthorized(f"the token does not grant publish on chain/{chain}")
        return grants.subject

    async def handle(self, request: web.Request) -> web.StreamResponse:
        chain = request.match_info["name"]
        if CHAIN_NAME.fullmatch(chain) is None:
            message = "a chain name is 1 to 64 letters, digits, '_' or '-'"
            return web.json_response({"code": "NotFound", "message": message}, status=404)
        try:
            device = self.device_name(request, chain)
        except OctosyncError as exc:
            return web.json_response({"code": exc.name, "message": str(exc)}, status=401)
        head = await self._connect_head(chain)
        if head is None:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.close(code=CLOSE_UNAVAILABLE, message=b"no chain head reachable")
            return ws
        reader, writer = head
        writer.write(chain_link.encode(chain_link.DeviceHello(0, device)))
        opened: list[bool] = []

        def open_session(rt: Runtime, conn: int, identity: ClaimGrants) -> ChainSession:
            relay = asyncio.get_running_loop().create_task(
                _to_device(reader, rt, conn, self.journal_state(rt, chain))
            )

            def closed() -> None:
                relay.cancel()
                writer.close()

            opened.append(True)
            journaled = rt.commits.journaled
            record = self.journal_events(rt, chain, device, conn) if journaled else None
            return ChainSession(rt, identity, writer.write, closed, record)

        response = await serve_ws(request, open_session)
        if not opened:  # refused before the upgrade (shutting down)
            writer.close()
        return response

    def journal_events(
        self, rt: Runtime, chain: str, device: str, conn: int
    ) -> Callable[[list[DeviceEvent], Callable[[], None]], None]:
        """Journal a device's events, then relay (``ChainSession``'s ``record``); a journal
        that cannot take them refuses the record (the device sends it again)."""
        commits = rt.commits
        who = f"{rt.run}.{conn}"

        def record(events: list[DeviceEvent], then: Callable[[], None]) -> None:
            commits.refuse()
            encoded = [
                encode_record(
                    ChainEventSeen(chain, device, e.device_sequencer, e.name, e.payload, who)
                )
                for e in events
            ]
            commits.submit(Commit(conn, encoded, (then,)))  # an empty list keeps the order

        return record

    def journal_state(self, rt: Runtime, chain: str) -> Callable[[StateUpdate], None]:
        """Journal each state change of ``chain`` once, as the first device's copy arrives
        (none without a journal; skipped, and tried with the next copy, when it is full)."""

        def record(update: StateUpdate) -> None:
            if not rt.commits.journaled or update.sequencer <= self.states_journaled.get(chain, 0):
                return
            seen = ChainStateSeen(
                chain,
                update.sequencer,
                update.replace,
                msgspec.json.encode(update.change).decode(),
                {d: tuple(s) for d, s in update.consumed.items()},
            )
            try:
                rt.commits.submit(Commit(0, (encode_record(seen),)))
            except OctosyncError:
                return
            self.states_journaled[chain] = update.sequencer

        return record

    async def _connect_head(
        self, chain: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            config, _ = await (await self._configs(chain)).read()
        except Exception:  # NATS unreachable or no such chain: the device retries later
            return None
        for member in config.members:  # the head first; the rest in order if it is gone
            with contextlib.suppress(OSError):
                return await asyncio.open_connection(member.host, member.port)
        return None


async def _to_device(
    reader: asyncio.StreamReader,
    rt: Runtime,
    conn: int,
    journal_state: Callable[[StateUpdate], None],
) -> None:
    """The head's records for this device, written to it; a lost head closes it with 1012."""
    try:
        while True:
            frame = await frames.read_frame(reader)
            if isinstance(frame, chain_link.ForDevice):
                if isinstance(frame.message, StateUpdate):
                    journal_state(frame.message)
                rt.deliver(conn, ws_frame(TO_DEVICE.encode(frame.message), text=True))
            elif isinstance(frame, chain_link.Refused):
                break
    except (asyncio.IncompleteReadError, ConnectionError, OSError, OctosyncError):
        pass
    link = rt.links.get(conn)
    if link is not None:
        link.close_soon(CLOSE_RESTART)


def add_routes(app: web.Application, config_url: str, auth: AuthConfig) -> ChainFace:
    """Serve ``/chain/{name}`` on ``app``; the face's NATS connections close with the app."""
    face = ChainFace(config_url, auth)
    app.router.add_get("/chain/{name}", face.handle)

    async def close(_: web.Application) -> None:
        await face.close()

    app.on_cleanup.append(close)
    return face
