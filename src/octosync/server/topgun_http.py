"""``POST /topgun/sync``: TopGun's HTTP sync (``HttpSyncProvider``) over the TopGun face's rules.

One MsgPack request, one MsgPack response (``topgun.http_sync``). The token comes as
``Authorization: Bearer`` (none, or an empty one, is the anonymous identity with
``--insecure-dev``). The request's ops go through the same write path as a WebSocket's: the
records are journaled, other connections get the events, and the response waits for the
commit when a write concern asks for ``PERSISTED`` (or for the cluster for ``REPLICATED``).
A request the server cannot read gets 400, a bad token 401, a full journal writer 503, each
with the reason in ``errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from octosync.crdt.sync_messages import WireTimestamp
from octosync.errors import AuthError, OctosyncError, Overloaded, Unauthorized
from octosync.server.auth import authenticate, bearer_token
from octosync.server.runtime import Runtime
from octosync.store.journal import check_room
from octosync.topgun import Effects, Outbound, http_sync
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th

PATH = "/topgun/sync"
COMMIT_WAIT = 10.0
"""Seconds a ``PERSISTED``/``REPLICATED`` answer waits for its commit before a 503."""


def handler(rt: Runtime) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def sync(request: web.Request) -> web.Response:
        try:
            return await _sync(rt, request)
        except OctosyncError as err:
            status = 401 if isinstance(err, AuthError) else 503 if _busy(err) else 400
            return _reply(rt, status, [th.HttpSyncError(err.code, f"{err.name}: {err.message}")])

    return sync


def _busy(err: OctosyncError) -> bool:
    return isinstance(err, Overloaded)


def _reply(rt: Runtime, status: int, errors: list[th.HttpSyncError]) -> web.Response:
    body = th.HttpSyncResponse(WireTimestamp.of(rt.topgun.hlc.now()), errors=errors)
    return web.Response(
        status=status, body=th.encode_response(body), content_type="application/x-msgpack"
    )


async def _sync(rt: Runtime, request: web.Request) -> web.Response:
    limit = rt.limits.max_frame_bytes
    if request.content_length is not None and request.content_length > limit:
        raise Overloaded(f"a sync request is at most {limit} bytes")
    token = bearer_token(request.headers.get("Authorization"), None) or None
    identity = authenticate(token, rt.config.auth)
    if identity.expired(rt.topgun.clock() / 1000):
        raise Unauthorized("the token expired", path="exp")
    body = await request.content.read(limit + 1)
    if len(body) > limit:
        raise Overloaded(f"a sync request is at most {limit} bytes")
    req = th.decode_request(body)
    http_sync.check(req)
    core = rt.topgun
    conn = rt.new_conn_id()
    core.connect(conn, identity)
    try:
        replies: list[tg.Message] = []
        batch = http_sync.op_batch(req)
        if batch is not None:
            if rt.writer is not None:
                # JournalUnavailable, or a full queue: nothing applied, nothing acked
                check_room(rt.writer, Overloaded, "send the ops again")
            replies = await _write(rt, conn, core.handle(conn, batch))
        response = http_sync.answer(core, conn, identity, req, replies)
    finally:
        rt.topgun_face.apply(core.disconnect(conn))
    return web.Response(body=th.encode_response(response), content_type="application/x-msgpack")


async def _write(rt: Runtime, conn: int, fx: Effects) -> list[tg.Message]:
    """Apply a batch's effects as a session does; the replies meant for this request, once
    what they wait for is done."""
    face = rt.topgun_face
    mine = [ob for ob in fx.out if ob.targets == (conn,)]
    face.deliver_all([ob for ob in fx.out if ob.targets != (conn,)])
    face.flush_soon()
    if fx.frames:
        face.publish_map_frames(fx.frames)
    loop = asyncio.get_running_loop()
    waits: list[asyncio.Future[None]] = []
    if rt.writer is not None and (fx.records or fx.durable):
        committed: asyncio.Future[None] = loop.create_future()
        rt.after_commit(conn, fx.records, lambda: _done(committed))
        if fx.durable:
            waits.append(committed)
    replicator = face.replicator if fx.replicate or fx.replicated else None
    if replicator is not None:
        stored: asyncio.Future[None] = loop.create_future()
        replicator.replicate(conn, fx.replicate, lambda: _done(stored))
        if fx.replicated or fx.durable:
            waits.append(stored)
    held: list[Outbound] = [*fx.durable, *fx.replicated]
    if waits:
        try:
            await asyncio.wait_for(asyncio.gather(*waits), COMMIT_WAIT)
        except TimeoutError:
            raise Overloaded("the write was not committed in time; send the ops again") from None
    elif held:
        mine.extend(held)  # nothing to wait for here (no journal, no cluster)
        held = []
    mine.extend(ob for ob in held if ob.targets == (conn,))
    return [tg.decode(ob.data) for ob in mine]


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
