"""The CRDT plane's I/O half: journal accepted ops, then send them, encoded once per dialect.

``hub.crdt_streams.CrdtStreams`` decides; this moves bytes. A writer's frame is checked, its
ops journaled through the runtime's ``GroupCommitWriter``, and only once the commit succeeded
merged, fanned out to the stream's readers and echoed to the writer as its acknowledgement. A
failed commit resets the writer's connection (``Runtime.after_commit``), so the writer, told
nothing, resends on reconnect. Every frame goes out through ``Hub.send_lossless``: a reader
whose queue is full is reset rather than silently missing an op, and catches up from the whole
state it gets on reconnect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from octosync.errors import InvalidRecord, LimitExceeded, Overloaded, StorageError
from octosync.hub.crdt_streams import Accepted, Checked, CrdtStreams
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp, CrdtSync
from octosync.store.records import PlaneOps, encode_record

if TYPE_CHECKING:
    from octosync.server.runtime import Runtime


@dataclass(frozen=True, slots=True)
class Framing:
    """How one member's frames are encoded: its dialect's encoder plus transport framing."""

    key: str
    encode: Callable[[CrdtSync], bytes]


class Plane:
    """The runtime's plane streams: members' framing, journaling, fan-out."""

    def __init__(self, runtime: Runtime, core: CrdtStreams) -> None:
        self.rt = runtime
        self.core = core
        self._framing: dict[ConnId, Framing] = {}

    def join(self, conn: ConnId, stream: str, framing: Framing, state: Sequence[CrdtOp]) -> None:
        """A member joined (``core.join`` done): it gets the whole state first, with the
        server's frontier."""
        self._framing[conn] = framing
        frontier = self.core.streams[stream].replica.frontier()
        self.send([conn], CrdtSync(frontier=frontier, ops=tuple(state)))

    def leave(self, conn: ConnId) -> None:
        self._framing.pop(conn, None)
        self.core.leave(conn)

    def receive(self, conn: ConnId, sync: CrdtSync) -> None:
        """A member's frame: answer its frontier, then journal and accept its ops."""
        checked = self.core.check(conn, sync)
        delta = self.core.delta_for(conn, sync)
        if delta:
            self.send([conn], CrdtSync(ops=delta))
        if not checked.ops:
            return
        writer = self.rt.writer
        if writer is None:
            self._accepted(self.core.commit(checked))
            return
        if not writer.has_room():
            raise StorageError("the journal writer is behind: its queue is full; resend later")
        try:
            record = encode_record(PlaneOps(checked.stream, checked.ops))
        except InvalidRecord as exc:
            raise LimitExceeded(
                f"the ops cannot be journaled: {exc.message}", path=exc.path
            ) from exc
        self.rt.after_commit(conn, [record], lambda: self._committed(checked))

    def _committed(self, checked: Checked) -> None:
        self._accepted(self.core.commit(checked))

    def _accepted(self, accepted: Accepted) -> None:
        if accepted.fanout:
            self.send(accepted.readers, CrdtSync(ops=accepted.fanout))
        self.send([accepted.writer], CrdtSync(ops=accepted.ack))

    def send(self, conns: Iterable[ConnId], sync: CrdtSync) -> None:
        """Encode ``sync`` once per framing and queue it for each of ``conns``."""
        encoded: dict[str, bytes] = {}
        hub = self.rt.hub
        for conn in conns:
            framing = self._framing.get(conn)
            if framing is None:
                continue
            data = encoded.get(framing.key)
            if data is None:
                data = encoded[framing.key] = framing.encode(sync)
            if not hub.send_lossless(conn, data):
                self.rt.fault(conn, Overloaded("this connection fell behind the plane; rejoin"))
