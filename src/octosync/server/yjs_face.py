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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from octosync.errors import InvalidRecord, LimitExceeded
from octosync.server.face_names import FaceName
from octosync.server.runtime import Runtime
from octosync.store.commit_path import Ask, Commit, CommitPath
from octosync.store.records import EncodedRecord, YjsUpdate, encode_record
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


RESEND = Ask(then="send the update again later")


class YjsFace:
    """The face's documents and what commits release."""

    def __init__(self, host: YjsHost, limits: Limits | None = None) -> None:
        self.host = host
        self.core = YjsDocuments(limits or Limits(max_update_bytes=max(1024, host.max_frame // 2)))

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
        commits.submit(Commit(conn, (record,), (lambda: self._committed(checked, confirm),)))

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
