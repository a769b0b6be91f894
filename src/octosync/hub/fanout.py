"""Fan-out: encode each accepted frame once per view into a shared log; drain per connection.

Subscribers of a stream are grouped by view; a frame is encoded once per view and appended to
that view's ``FrameLog``, where subscribers hold cursors. Only subscribers that were caught up
are woken (once until they drain), and only those the log's bounds leave behind are reset to a
snapshot; nobody else is touched. A failure encoding for one view, or draining one connection,
faults that view's or that connection's subscribers alone (``Connection.fault``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from octosync.errors import InternalError, OctosyncError
from octosync.hub.connections import Connection
from octosync.hub.frame_log import FrameLog
from octosync.hub.model import Body, Frame, SnapshotFrame
from octosync.hub.types import (
    ConnId,
    Encoder,
    HubConfig,
    HubStats,
    OutFrame,
    StreamId,
    StreamView,
    ViewFactory,
    ViewKey,
)

Replay = Callable[[StreamId], list[Frame[Body]]]
"""The frames that bring a new subscriber to a stream's current state (from the authority)."""


@dataclass(eq=False, slots=True)
class Audience:
    """One stream's subscribers, grouped by view, with one shared log per view."""

    id: StreamId
    subscribers: dict[ConnId, Connection] = field(default_factory=dict)
    by_view: dict[ViewKey, dict[ConnId, Connection]] = field(default_factory=dict)
    logs: dict[ViewKey, FrameLog[ConnId]] = field(default_factory=dict)
    replay_cache: dict[ViewKey, list[bytes]] = field(default_factory=dict)
    views: dict[ViewKey, StreamView] = field(default_factory=dict)
    """The state of each restricted view of this stream (it lives as long as its log)."""


class Fanout:
    def __init__(
        self,
        config: HubConfig,
        stats: HubStats,
        replay: Replay,
        collapsible: Callable[[StreamId], bool],
        encoders: dict[str, Encoder],
        views: dict[str, ViewFactory],
    ) -> None:
        self.config = config
        self.stats = stats
        self._replay = replay
        self._collapsible = collapsible
        self.encoders = encoders
        self.views = views
        self.audiences: dict[StreamId, Audience] = {}
        self._ts = itertools.count(1)

    def next_ts(self) -> int:
        return next(self._ts)

    def check_view(self, view: ViewKey) -> None:
        if view.encoder not in self.encoders:
            raise ValueError(f"no encoder registered as {view.encoder!r}")
        if view.view != "all" and view.view not in self.views:
            raise ValueError(f"no view registered as {view.view!r}")

    # --- membership ---------------------------------------------------------------------

    def subscribe(self, c: Connection, stream_id: StreamId) -> None:
        audience = self.audiences.get(stream_id)
        if audience is None:
            audience = self.audiences[stream_id] = Audience(stream_id)
        if c.id not in audience.subscribers:
            self._join(audience, c)
        c.subscriptions.add(stream_id)
        self.request_snapshot(c, stream_id)

    def unsubscribe(self, c: Connection, stream_id: StreamId) -> None:
        c.subscriptions.discard(stream_id)
        c.pending_snapshot.discard(stream_id)
        self._leave(stream_id, c)

    def leave_all(self, c: Connection) -> None:
        for sid in list(c.subscriptions):
            self._leave(sid, c)

    def change_view(self, c: Connection, view: ViewKey) -> None:
        for sid in c.subscriptions:
            self._leave(sid, c, forget=False)
        c.view = view
        for sid in c.subscriptions:
            # The new view's log has its own positions: restart from a snapshot in it.
            audience = self.audiences.get(sid) or self.audiences.setdefault(sid, Audience(sid))
            self._join(audience, c)
            c.pending_snapshot.add(sid)
        if c.subscriptions:
            c.wake(c.id)

    def request_snapshot(self, c: Connection, stream_id: StreamId) -> None:
        """The snapshot replaces whatever backlog the connection had on this stream."""
        c.pending_snapshot.add(stream_id)
        log = c.logs.get(stream_id)
        if log is not None:
            log.remove(c.id)
        c.wake(c.id)

    def has_subscribers(self, stream_id: StreamId) -> bool:
        a = self.audiences.get(stream_id)
        return a is not None and bool(a.subscribers)

    def subscribers_of(self, stream_id: StreamId) -> list[ConnId]:
        a = self.audiences.get(stream_id)
        return [] if a is None else list(a.subscribers)

    def _join(self, audience: Audience, c: Connection) -> None:
        audience.subscribers[c.id] = c
        audience.by_view.setdefault(c.view, {})[c.id] = c
        log = audience.logs.get(c.view)
        if log is None:
            log = audience.logs[c.view] = FrameLog(self.config.outbox)
            if c.view.view != "all":
                audience.views[c.view] = self.views[c.view.view]()
        c.logs[audience.id] = log

    def _leave(self, stream_id: StreamId, c: Connection, *, forget: bool = True) -> None:
        audience = self.audiences.get(stream_id)
        if audience is None:
            return
        audience.subscribers.pop(c.id, None)
        group = audience.by_view.get(c.view)
        if group is not None:
            group.pop(c.id, None)
            if not group:
                del audience.by_view[c.view]
        c.logs.pop(stream_id, None)
        log = audience.logs.get(c.view)
        if log is not None:
            log.remove(c.id)
            if group is None or not group:
                del audience.logs[c.view]
                audience.views.pop(c.view, None)
                audience.replay_cache.pop(c.view, None)
        if forget and not audience.subscribers:
            del self.audiences[stream_id]

    # --- fan-out ------------------------------------------------------------------------

    def invalidate(self, stream_id: StreamId) -> None:
        """The stream's state changed: cached replay bytes are stale."""
        audience = self.audiences.get(stream_id)
        if audience is not None and audience.replay_cache:
            audience.replay_cache.clear()

    def publish(self, stream_id: StreamId, frame: Frame[Body]) -> None:
        """Append the frame once per view to that view's shared log: O(views), not O(subs)."""
        audience = self.audiences.get(stream_id)
        if audience is None:
            return
        audience.replay_cache.clear()
        ts = self.next_ts()
        is_snapshot = isinstance(frame, SnapshotFrame)
        stats = self.stats
        for view, group in list(audience.by_view.items()):
            try:
                data = self._encode(view, audience, frame, ts, live=True)
            except Exception as exc:
                # This view's encoder failed: its subscribers are reset; other views go on.
                for c in list(group.values()):
                    self.fault(c, exc)
                continue
            if data is None:
                continue  # nothing of this frame is visible in this view
            log = audience.logs[view]
            if is_snapshot:
                # Subscribers waiting for a snapshot start their cursor at this one.
                for c in group.values():
                    if stream_id in c.pending_snapshot:
                        c.pending_snapshot.discard(stream_id)
                        log.add(c.id)
            caught_up, lost = log.append(data)
            for conn in caught_up:
                group[conn].wake(conn)
            for conn, missed in lost:
                c = group[conn]
                stats.drops += missed
                stats.resets += 1
                # Its backlog no longer fits: it restarts from a snapshot taken when it can
                # next write, and nobody else waits for it.
                c.pending_snapshot.add(stream_id)
                c.wake(conn)

    def encode_for(self, c: Connection, out: OutFrame) -> bytes:
        """One frame in ``c``'s own encoding (a write forwarded to a producer)."""
        try:
            return self.encoders[c.view.encoder](out)
        except Exception as exc:
            raise InternalError(f"a frame could not be encoded for {c.id}: {exc!r}") from exc

    def _encode(
        self, view: ViewKey, audience: Audience, frame: Frame[Body], ts: int, *, live: bool
    ) -> bytes | None:
        body: object | None = frame.body
        stream = audience.id
        if view.view != "all":
            state = audience.views.get(view)
            if state is None:  # a replay for a view nobody holds yet (no log: nothing to chain)
                state = self.views[view.view]()
            body = state.live(frame.body) if live else state.replay(frame.body)
            if body is None:
                return None
        kind: Literal["snapshot", "diff"] = (
            "snapshot" if isinstance(frame, SnapshotFrame) else "diff"
        )
        epoch = frame.epoch if isinstance(frame, SnapshotFrame) else frame.to_epoch
        self.stats.encodes += 1
        return self.encoders[view.encoder](OutFrame(stream, kind, epoch, body, ts))

    # --- draining -----------------------------------------------------------------------

    def drain(self, c: Connection, *, joined: bool) -> tuple[list[bytes], int]:
        """Control frames first, then per stream: a pending snapshot, or the log backlog.

        Raises the connection's fault (an ``OctosyncError``) instead when serving it failed,
        so the caller can reset that one connection with a typed error.
        """
        if c.fault is not None:
            raise c.fault
        try:
            return self._drain_parts(c, joined=joined)
        except Exception as exc:
            self.fault(c, exc)
            assert c.fault is not None
            raise c.fault from exc

    def _drain_parts(self, c: Connection, *, joined: bool) -> tuple[list[bytes], int]:
        parts = c.outbox.take() if c.outbox else []
        frames = len(parts)
        subs = c.subscriptions
        pending = c.pending_snapshot
        for sid in subs if len(subs) < 2 else sorted(subs, key=repr):
            log = c.logs.get(sid)
            if pending and sid in pending:
                replay = self._replay_bytes(sid, c.view)
                if replay:
                    # The replay is built from the mirror as of now: it covers the whole log.
                    parts.extend(replay)
                    frames += len(replay)
                    pending.discard(sid)
                    if log is not None:
                        log.add(c.id)
                # else: nothing to replay yet; the next snapshot published wakes it.
                continue
            if log is None:
                continue
            if self.config.coalesce_backlog and len(subs) == 1 and log.backlog(c.id) > 1:
                data = self._coalesce(sid, c, log.take(c.id))
                parts.extend(data)
                frames += len(data)
            elif joined:
                blob, n = log.take_joined(c.id)
                if n:
                    parts.append(blob)
                    frames += n
            else:
                data = log.take(c.id)
                parts.extend(data)
                frames += len(data)
        return parts, frames

    def _coalesce(self, stream_id: StreamId, c: Connection, data: list[bytes]) -> list[bytes]:
        """A backlog of deltas collapses to one snapshot when that is smaller.

        The subscriber fell behind (several deltas queued since its last write); the hub's
        mirror already holds the state they lead to, and its snapshot bytes are cached and
        shared per view, so this costs a size comparison. The receiver ends in the same state
        at the same epoch (lazily-spec reliable-sync ``state_suffix_collapses_to_snapshot``).
        """
        if not self._collapsible(stream_id):
            return data
        replay = self._replay_bytes(stream_id, c.view)
        if len(replay) == 1 and len(replay[0]) < sum(map(len, data)):
            self.stats.coalesced += len(data)
            return replay
        return data

    def _replay_bytes(self, stream_id: StreamId, view: ViewKey) -> list[bytes]:
        audience = self.audiences.get(stream_id)
        if audience is not None:
            cached = audience.replay_cache.get(view)
            if cached is not None:
                return cached
        ts = self.next_ts()
        out = []
        where = audience if audience is not None else Audience(stream_id)
        for frame in self._replay(stream_id):
            data = self._encode(view, where, frame, ts, live=False)
            if data is not None:
                out.append(data)
        if audience is not None and out:
            audience.replay_cache[view] = out
        return out

    def fault(self, c: Connection, exc: BaseException) -> None:
        """Serving ``c`` failed: it leaves every stream's log and is woken to be reset."""
        if c.fault is None:
            c.fault = (
                exc
                if isinstance(exc, OctosyncError)
                else InternalError(f"serving this connection failed: {exc!r}")
            )
        for sid in list(c.subscriptions):
            self._leave(sid, c, forget=False)
        c.pending_snapshot.clear()
        c.wake(c.id)

    def backlog_of(self, stream_id: StreamId) -> int:
        """Frames of one stream waiting in its logs, summed over the subscribers behind."""
        a = self.audiences.get(stream_id)
        return 0 if a is None else sum(log.total_backlog() for log in a.logs.values())

    def backlog(self) -> int:
        """Frames waiting in shared logs, summed over their members."""
        return sum(log.total_backlog() for a in self.audiences.values() for log in a.logs.values())
