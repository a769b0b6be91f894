"""``POST /topgun/sync``: TopGun's HTTP sync (``HttpSyncProvider``) over the TopGun face's rules.

One MsgPack request, one MsgPack response (``topgun.http_sync``). The token comes as
``Authorization: Bearer`` (none, or an empty one, is the anonymous identity with
``--insecure-dev``). The request's ops go through the same write path as a WebSocket's: the
records are journaled, other connections get the events, and the response waits for the
commit when a write concern asks for ``PERSISTED`` (or for the cluster for ``REPLICATED``).
A request the server cannot read gets 400, a bad token 401, a storage rule's refusal (a full
journal writer, ...) or a failed commit 503, each with the reason in ``errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from octosync.crdt.sync_messages import WireTimestamp
from octosync.errors import AuthError, OctosyncError, Overloaded, Unauthorized
from octosync.server.auth import authenticate, bearer_token
from octosync.server.runtime import Runtime
from octosync.server.topgun_effects import Release, carry_out
from octosync.server.topgun_state import topgun_state
from octosync.store.commit_path import Ask
from octosync.topgun import Effects, http_sync
from octosync.wire import topgun as tg
from octosync.wire import topgun_http as th

PATH = "/topgun/sync"
COMMIT_WAIT = 10.0
"""Seconds a ``PERSISTED``/``REPLICATED`` answer waits for its commit before a 503."""
ASK = Ask(Overloaded, "send the ops again")
"""The storage rules' refusals on this face: 503, the ops to be sent again."""


def handler(rt: Runtime) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def sync(request: web.Request) -> web.Response:
        try:
            return await _sync(rt, request)
        except OctosyncError as err:
            status = 401 if isinstance(err, AuthError) else 503 if _busy(err) else 400
            # ``context`` names what the error is about: here the request's field, if any
            error = th.HttpSyncError(err.code, f"{err.name}: {err.message}", err.path)
            return _reply(rt, status, [error])

    return sync


def _busy(err: OctosyncError) -> bool:
    return isinstance(err, Overloaded)


def _reply(rt: Runtime, status: int, errors: list[th.HttpSyncError]) -> web.Response:
    body = th.HttpSyncResponse(WireTimestamp.of(topgun_state(rt).core.hlc.now()), errors=errors)
    return web.Response(
        status=status, body=th.encode_response(body), content_type="application/x-msgpack"
    )


async def _sync(rt: Runtime, request: web.Request) -> web.Response:
    limit = rt.limits.max_frame_bytes
    if request.content_length is not None and request.content_length > limit:
        raise Overloaded(f"a sync request is at most {limit} bytes")
    token = bearer_token(request.headers.get("Authorization"), None) or None
    identity = authenticate(token, rt.config.auth)
    if identity.expired(topgun_state(rt).core.clock() / 1000):
        raise Unauthorized("the token expired", path="exp")
    body = await request.content.read(limit + 1)
    if len(body) > limit:
        raise Overloaded(f"a sync request is at most {limit} bytes")
    req = th.decode_request(body)
    http_sync.check(req)
    core = topgun_state(rt).core
    conn = rt.new_conn_id()
    core.connect(conn, identity)
    try:
        replies: list[tg.Message] = []
        batch = http_sync.op_batch(req)
        if batch is not None:
            rt.commits.refuse(ASK)  # the storage rules: nothing applied, nothing acked
            replies = await _write(rt, conn, core.handle(conn, batch))
        response = http_sync.answer(core, conn, identity, req, replies)
    finally:
        topgun_state(rt).face.apply(core.disconnect(conn))
    return web.Response(body=th.encode_response(response), content_type="application/x-msgpack")


class _Answer:
    """``topgun_effects.Own`` for one request: its replies, the held ones once released, or
    the commit's failure (answered 503 at once)."""

    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.due: asyncio.Future[list[bytes]] | None = None

    def now(self, data: list[bytes]) -> None:
        self.replies.extend(data)

    def hold(self) -> Release:
        due = self.due = asyncio.get_running_loop().create_future()

        def release(data: list[bytes]) -> None:
            if not due.done():
                due.set_result(data)

        return release

    def failed(self, err: OctosyncError) -> None:
        if self.due is not None and not self.due.done():
            self.due.set_exception(
                Overloaded(f"the write was not committed ({err.message}); send the ops again")
            )


async def _write(rt: Runtime, conn: int, fx: Effects) -> list[tg.Message]:
    """Carry out a batch's effects as a session does; the replies meant for this request,
    once what they wait for is done."""
    answer = _Answer()
    carry_out(topgun_state(rt).face, conn, fx, answer)
    replies = answer.replies
    if answer.due is not None:
        try:
            replies = replies + await asyncio.wait_for(answer.due, COMMIT_WAIT)
        except TimeoutError:
            raise Overloaded("the write was not committed in time; send the ops again") from None
    return [tg.decode(data) for data in replies]
