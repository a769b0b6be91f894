"""The ``/yjs`` face's I/O half: journal each update, then apply it, fan it out, confirm it.

``yjs.documents.YjsDocuments`` decides; this moves bytes. An update is checked by the core,
refused up front by the storage rules (the one commit path, ``server.commit``:
``JournalUnavailable`` while commits fail, ``StorageError`` while the writer's queue is full
or the disk nearly is), submitted as a ``YjsUpdate`` record, and only once the commit
succeeded applied to the document, sent to the document's other connections and confirmed to
its writer (Hocuspocus's ``SyncStatus``). A failed commit resets the writer's connection:
nothing was confirmed, so its provider keeps the update pending and sends it again on
reconnect. Frames
go out through ``deliver``: a connection that cannot keep up is dropped, and catches up by
the sync exchange on reconnect, so nobody silently misses an update.

In a cluster (``links.cluster_yjs``) a journaled update is published to the cluster's Yjs op
stream next, and applied, fanned out and confirmed only once JetStream stored it; updates
other nodes accepted come in through ``merge_remote``: applied, fanned out, journaled with
the stream position behind them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pycrdt import Doc, merge_updates

from octosync.cluster.yjs import YjsClusterStats
from octosync.errors import InvalidRecord, LimitExceeded, OctosyncError
from octosync.server.face_names import FaceName
from octosync.server.face_state import ClusterJoin, FaceLink, FaceState
from octosync.server.runtime import Runtime
from octosync.store.commit_path import Ask, Commit, CommitPath
from octosync.store.journal import Journal
from octosync.store.records import EncodedRecord, YjsUpdate, encode_record
from octosync.store.yjs_compaction import restore_yjs
from octosync.wire.websocket import ws_frame
from octosync.yjs.documents import Checked, Limits, Out, YjsDocuments

log = logging.getLogger(__name__)


class YjsHost(Protocol):
    """What the face uses of the server (``server.runtime.Runtime``)."""

    @property
    def commits(self) -> CommitPath: ...

    @property
    def run(self) -> str: ...

    @property
    def max_frame(self) -> int: ...

    def deliver(self, conn: int, *data: bytes) -> None: ...

    def fault(self, conn: int, err: OctosyncError) -> None: ...


class YjsReplicator(Protocol):
    """Where a cluster stores accepted updates besides the journal (``links.cluster_yjs``):
    ``then`` once they are stored; an update not stored in time resets ``conn``."""

    @property
    def stats(self) -> YjsClusterStats: ...

    @property
    def position(self) -> int:
        """The cluster's Yjs op stream's sequence this node has taken up to."""
        ...

    def replicate(
        self, conn: int, document: str, update: bytes, then: Callable[[], None]
    ) -> None: ...


RESEND = Ask(then="send the update again later")


class YjsFace(FaceState):
    """The face's documents and what commits release; the face's state (``Face.state``)."""

    def __init__(self, host: YjsHost, limits: Limits | None = None) -> None:
        self.host = host
        self.core = YjsDocuments(limits or Limits(max_update_bytes=max(1024, host.max_frame // 2)))
        self.replicator: YjsReplicator | None = None
        """In a cluster, the op stream each journaled update is published to before it is
        applied, fanned out and confirmed."""
        self._positions_ok = True
        """False once remote updates could not be queued for the journal: positions stop
        being journaled, so a restart replays the cluster's stream from before them."""

    def update(
        self, conn: int, name: str, update: bytes, confirm: Callable[[], None] | None
    ) -> None:
        """``conn``'s update on ``name``: checked, journaled, then applied, fanned out and
        ``confirm``ed. An update that carries nothing is confirmed after what is queued
        before it commits (a barrier), so a confirmation never overtakes an earlier one."""
        checked = self.core.check(conn, name, update)
        commits = self.host.commits
        if checked is None:
            if confirm is not None:
                commits.submit(Commit(conn, (), (confirm,)))
            return
        commits.refuse(RESEND)
        record = self._record(checked)
        commits.submit(Commit(conn, (record,), (lambda: self._stored(checked, confirm),)))

    def _stored(self, checked: Checked, confirm: Callable[[], None] | None) -> None:
        """Journaled; in a cluster, published next."""
        replicator = self.replicator
        if replicator is None:
            self._committed(checked, confirm)
        else:
            replicator.replicate(
                checked.conn,
                checked.document,
                checked.update,
                lambda: self._committed(checked, confirm),
            )

    def _record(self, checked: Checked) -> EncodedRecord:
        try:
            return encode_record(
                YjsUpdate(checked.document, checked.update, f"{self.host.run}.{checked.conn}")
            )
        except InvalidRecord as exc:
            raise LimitExceeded(
                f"the update cannot be journaled: {exc.message}", path=exc.path
            ) from exc

    def _committed(self, checked: Checked, confirm: Callable[[], None] | None) -> None:
        self.send(self.core.commit(checked))
        if confirm is not None:
            confirm()

    # -- hooks (``server.face_state``) ------------------------------------------------------

    def restore(self, journal: Journal) -> None:
        restore_yjs(journal, self.core)

    def join_cluster(self, join: ClusterJoin) -> Sequence[FaceLink]:
        """The documents' op stream (after ``restore``: its position)."""
        from octosync.links.cluster_yjs import YjsLink

        link = YjsLink(self, join.link.node, cluster=join.cluster, settings=join.settings)
        self.replicator = link
        return (link,)

    def metrics(self) -> Iterator[Metric]:
        if self.replicator is not None:
            yield from yjs_metrics(self.replicator.stats, self.replicator.position)

    # -- the cluster's side ----------------------------------------------------------------

    def docs(self) -> Mapping[str, Doc[Any]]:
        return self.core.docs()

    @property
    def replica_position(self) -> int:
        return self.core.replica_position

    def fault(self, conn: int, err: OctosyncError) -> None:
        self.host.fault(conn, err)

    def merge_remote(self, document: str, updates: Sequence[bytes], position: int | None) -> int:
        """Updates another node accepted (stored in the cluster's stream up to ``position``):
        applied and fanned out at once, journaled as one merged update with the position
        behind them (nobody waits for that commit: the stream holds them). Returns how many
        were applied."""
        applied: list[bytes] = []
        for update in updates:
            try:
                self.send(self.core.apply_remote(document, update))
            except OctosyncError as exc:  # a node's bug: the rest still apply
                log.warning("cluster: a Yjs update of %r not applied: %s", document, exc)
                continue
            applied.append(update)
        commits = self.host.commits
        if not commits.journaled or not applied:
            return len(applied)
        at = position if self._positions_ok else None
        try:
            merged = applied[0] if len(applied) == 1 else merge_updates(*applied)
            commits.submit(Commit(0, (encode_record(YjsUpdate(document, merged, position=at)),)))
        except Exception as exc:  # nobody waits: a restart replays the stream from before
            if self._positions_ok:
                log.warning("cluster: remote Yjs updates not journaled (%s); positions stop", exc)
            self._positions_ok = False
        return len(applied)

    def send(self, outs: list[Out]) -> None:
        """Each body to its connections, framed once per prefix."""
        core = self.core
        deliver = self.host.deliver
        for out in outs:
            framed: dict[bytes, bytes] = {}
            for conn in out.conns:
                if not core.is_member(conn, out.document):
                    continue
                prefix = core.prefix(conn, out.document)
                data = framed.get(prefix)
                if data is None:
                    data = framed[prefix] = ws_frame(prefix + out.body, text=False)
                deliver(conn, data)

    def to(self, conn: int, name: str, body: bytes) -> None:
        """One body to one member, now (a confirmation after a commit)."""
        if self.core.is_member(conn, name):
            self.host.deliver(conn, ws_frame(self.core.prefix(conn, name) + body, text=False))


def yjs_face(rt: Runtime) -> YjsFace:
    """The server's one ``YjsFace`` (made on first use: its sessions and the recovery at
    start-up share it)."""
    return rt.face_state(FaceName.YJS, YjsFace)


def yjs_metrics(stats: YjsClusterStats, position: int) -> Iterator[Metric]:
    """``/yjs`` documents across the cluster: their op stream both ways, and anti-entropy."""
    for name, help_text, value in (
        ("published", "Yjs update batches stored in the cluster's stream", stats.published),
        ("republished", "Yjs update batch publishes sent again", stats.republished),
        ("failed", "Yjs update batches given up on (writers reset)", stats.failed),
        ("batches_in", "Yjs update batches read from the stream", stats.batches_in),
        ("applied", "Other nodes' Yjs updates applied here", stats.applied),
        ("repaired", "Diffs from anti-entropy applied here", stats.repaired),
        ("pushed", "Diffs sent to a node whose document lacked them", stats.pushed),
        ("too_large", "Diffs not sent: past a round's byte bound", stats.too_large),
        ("resubscribed", "Times the Yjs stream was followed again", stats.resubscribed),
        ("undecodable", "Yjs cluster messages not applied", stats.undecodable),
        ("unreplayed", "Yjs stream messages gone before this node took them", stats.unreplayed),
    ):
        yield CounterMetricFamily(f"octosync_cluster_yjs_{name}", help_text, value)
    yield GaugeMetricFamily(
        "octosync_cluster_yjs_position", "The Yjs stream's sequence taken up to", position
    )
