"""TopGun requests beyond maps, queries, topics, searches, locks and counters: what this
server answers, and a typed refusal (``RemoteProtocolError``) for a message that is not a
request a client sends.

Entry processors and conflict resolvers are answered as TopGun's own server answers them: a
failed response per request (an empty list for ``LIST_RESOLVERS``), since running client code
on the server needs a sandbox neither server has.
"""

from __future__ import annotations

from typing import Protocol

from octosync.errors import RemoteProtocolError
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv


class Replies(Protocol):
    """Where an answer goes (``topgun.core.Effects``: to this connection, in order)."""

    def send(self, conn: int, message: tg.Message) -> None: ...


_SANDBOX = "entry processors and conflict resolvers need a code sandbox this server does not have"

_NO_REPLY = (
    rq.ClientApplyAck,  # TopGun's tombstone frontier; octosync's GC horizon is time-based
)


def serve(fx: Replies, conn: int, message: tg.Message) -> None:
    """Answer ``message`` into ``fx``, or raise the typed error that refuses it."""
    if isinstance(message, _NO_REPLY):
        return
    match message:
        case sv.ListResolvers(request_id=request_id):
            fx.send(conn, sv.ListResolversResponse(request_id, []))
            return
        case sv.EntryProcess(request_id=request_id):
            fx.send(conn, sv.EntryProcessResponse(request_id, False, error=_SANDBOX))
            return
        case rq.EntryProcessBatch(request_id=request_id, keys=keys):
            failed = rq.EntryProcessKeyResult(False, error=_SANDBOX)
            fx.send(conn, rq.EntryProcessBatchResponse(request_id, dict.fromkeys(keys, failed)))
            return
        case sv.RegisterResolver(request_id=request_id):
            fx.send(conn, rq.RegisterResolverResponse(request_id, False, _SANDBOX))
            return
        case rq.UnregisterResolver(request_id=request_id):
            fx.send(conn, rq.UnregisterResolverResponse(request_id, False, _SANDBOX))
            return
    raise RemoteProtocolError(
        f"{type(message).__name__} is not a request this server's TopGun face takes", path="type"
    )
