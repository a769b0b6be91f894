"""TopGun requests beyond maps, queries, topics, locks and counters: what this server serves,
and a typed refusal (``FeatureDisabled``, answered in the request's own response type by
``topgun.replies``) for what it does not.

Entry processors and conflict resolvers are answered as TopGun's own server answers them: a
failed response per request (an empty list for ``LIST_RESOLVERS``), since running client code
on the server needs a sandbox neither server has.
"""

from __future__ import annotations

from typing import Protocol

from octosync.errors import RemoteProtocolError
from octosync.topgun.replies import disabled
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv


class Replies(Protocol):
    """Where an answer goes (``topgun.core.Effects``: to this connection, in order)."""

    def send(self, conn: int, message: tg.Message) -> None: ...


_SANDBOX = "entry processors and conflict resolvers need a code sandbox this server does not have"

_UNSERVED: dict[type, str] = {
    rq.HybridQuerySubscribe: "hybrid queries",
}
"""Requests this server refuses as a feature it does not serve, by message type."""

_NO_REPLY = (
    rq.ClientApplyAck,  # TopGun's tombstone frontier; octosync's GC horizon is time-based
    rq.HybridQueryUnsubscribe,
)


def serve(fx: Replies, conn: int, message: tg.Message) -> None:
    """Answer ``message`` into ``fx``, or raise the typed error that refuses it."""
    if isinstance(message, _NO_REPLY):
        return
    feature = _UNSERVED.get(type(message))
    if feature is not None:
        raise disabled(feature)
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
