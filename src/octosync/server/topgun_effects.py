"""TopGun's effects carried out, once for every caller: a session, ``POST /topgun/sync``, the face.

``topgun.Effects`` says what a TopGun step wants: typed messages now (encoded here, by
``server.topgun_wire``) (``out``), records to journal
(``records``), acks that wait for the commit (``durable``) or for the cluster
(``replicated``; a durable ack in a cluster waits for both), op records for the cluster
(``replicate``), ``map:`` frames and off-loop work. ``carry_out`` does it on the one commit
path (``store.commit_path``): the records are submitted with the held acks' release as their
after-commit effect, so no ack goes out before what it acknowledges is durable, and a failed
commit answers the caller (``Own.failed``) or resets its connection.

The caller's own replies go through its ``Own`` (a session's ordered reply queue, an HTTP
response); everything for other connections through the face's ``deliver_all``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from octosync.ipc.messages import Delta, Snapshot
from octosync.server.ports import Replicator
from octosync.server.topgun_wire import data
from octosync.store.commit_path import Commit, CommitPath, Failed
from octosync.topgun import Effects, Outbound
from octosync.topgun.offload import OffLoop

Release = Callable[[list[bytes]], None]
"""Sends the caller's held replies (its acks), in their place, once every wait is over."""


class Own(Protocol):
    """Where the replies for the connection that caused the effects go."""

    def now(self, data: list[bytes]) -> None:
        """Replies due now, in order (behind any reply still held)."""
        ...

    def hold(self) -> Release:
        """Keep a place, in order, for replies that wait; the place is released by the call."""
        ...

    @property
    def failed(self) -> Failed | None:
        """Answers a failed commit of this caller's records (None: its connection is reset)."""
        ...


class Ways(Protocol):
    """What carrying out effects uses of the face (``server.topgun_face.TopGunFace``)."""

    @property
    def commits(self) -> CommitPath: ...

    @property
    def replicator(self) -> Replicator | None: ...

    def deliver_all(self, out: Sequence[Outbound]) -> None: ...

    def flush_soon(self) -> None: ...

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None: ...

    def offload(self, job: OffLoop) -> None: ...


def carry_out(ways: Ways, conn: int, fx: Effects, own: Own | None) -> None:
    """Carry out ``fx`` for ``conn`` (``own`` None: the server's own effects, conn 0)."""
    mine = (conn,)
    if own is None:
        ways.deliver_all(fx.out)
    else:
        own.now(data([ob for ob in fx.out if ob.targets == mine]))
        ways.deliver_all([ob for ob in fx.out if ob.targets != mine])
    for job in fx.offload:
        ways.offload(job)
    if own is not None:  # a client's step; the server's own are flushed by their caller
        ways.flush_soon()
    if fx.frames:
        ways.publish_map_frames(fx.frames)
    commits = ways.commits
    replicator = ways.replicator if fx.replicate or fx.replicated else None
    # What waits for the cluster: REPLICATED acks, and durable acks of a batch it stores.
    wait_replica = replicator is not None and bool(fx.replicated or (fx.durable and fx.replicate))
    journal = commits.journaled and bool(fx.records or fx.durable)
    failed = None if own is None else own.failed
    if not (fx.durable or wait_replica):
        _send(ways, own, mine, fx.replicated)  # no cluster here: nothing to wait for
        if journal:
            commits.submit(Commit(conn, fx.records, failed=failed))
        if replicator is not None:
            replicator.replicate(conn, fx.replicate, None)
        return
    # Acks that wait: for the commit (durable), for the cluster (replicated). The place
    # is released when every wait is over.
    held = [*fx.durable, *fx.replicated]
    release = None if own is None else own.hold()
    waits = [int(bool(fx.durable)) + int(wait_replica)]

    def one_done() -> None:
        waits[0] -= 1
        if waits[0] == 0:
            if release is None:
                ways.deliver_all(held)
                return
            release(data([ob for ob in held if ob.targets == mine]))
            ways.deliver_all([ob for ob in held if ob.targets != mine])

    if fx.durable:
        commits.submit(Commit(conn, fx.records, (one_done,), failed))
    elif journal:
        commits.submit(Commit(conn, fx.records, failed=failed))
    if replicator is not None:
        replicator.replicate(conn, fx.replicate, one_done if wait_replica else None)


def _send(ways: Ways, own: Own | None, mine: tuple[int], out: list[Outbound]) -> None:
    if own is None:
        ways.deliver_all(out)
        return
    own.now(data([ob for ob in out if ob.targets == mine]))
    ways.deliver_all([ob for ob in out if ob.targets != mine])
