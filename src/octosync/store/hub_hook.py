"""Journal every frame the hub accepts: an ``on_accept`` hook for ``server.app.build_app``.

The hub hands its hook ``(stream, conn, frame)`` inline, before fan-out, and the hook must not
block: it submits to a :class:`GroupCommitWriter` and returns (the commit follows within one
group-commit round), so frames reach the journal in the order the hub accepted them.
A frame that carries the producer's own bytes (``Sent``: every lazily frame from a face) is
journalled as those bytes with their dialect; ``encode`` serves the rest (``body_bytes`` by
default: a WVP frame as its canonical CBOR, ``wvp.encode_frame``, which splices the producer's
raw graph and ops; a frame built in-process as MsgPack). ``serve`` wires a ``JournalRecorder``
into the hub, on the server's commit path (``store.commit_path``): the storage rules refuse a
frame before the hub changes anything, and a producer learns its frame is durable (or is reset
when its commit failed) through the path's after-commit effects.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import cast

import msgspec

from octosync.errors import InvalidRecord
from octosync.hub.model import Body, DiffFrame, Frame, SnapshotFrame
from octosync.hub.types import AcceptHook, ConnId, RecordCommit, StreamId
from octosync.store.commit_path import Commit, CommitPath
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import (
    EncodedRecord,
    FrameCodec,
    StreamDropped,
    StreamFrame,
    encode_record,
)
from octosync.store.storage_rules import DirectPath
from octosync.wire import wvp

Encode = Callable[[Body], bytes]


def body_bytes(body: Body) -> bytes:
    """The journalled form of a frame body, per face (see the module docstring)."""
    if isinstance(body, wvp.WarpSnapshot | wvp.WarpDiff):
        return wvp.encode_frame(body)
    return msgspec.msgpack.encode(body)


def frame_record(
    stream: str, frame: Frame[Body], encode: Encode = body_bytes, producer: str | None = None
) -> StreamFrame:
    """The journal record of one accepted hub frame (anything else, whatever its static type
    said, is ``InvalidRecord``: the journal never stores what recovery could not read)."""
    if isinstance(frame, DiffFrame):
        base, epoch, snapshot = frame.from_epoch, frame.to_epoch, False
    elif isinstance(frame, SnapshotFrame):
        base = epoch = frame.epoch
        snapshot = True
    else:
        raise InvalidRecord(f"not a hub frame: {type(frame).__name__}", path="frame")
    sent = frame.sent
    return StreamFrame(
        stream=str(stream),
        base_epoch=base,
        epoch=epoch,
        snapshot=snapshot,
        payload=encode(frame.body) if sent is None else sent.data,
        state_hash=frame.state_hash,
        # a codec outside FrameCodec is refused by encode_record's strict check
        codec=None if sent is None else cast("FrameCodec", sent.codec),
        producer=producer,
    )


class Prepared(msgspec.Struct, frozen=True):
    """A record ready to queue, with what its commit tells the producer."""

    record: EncodedRecord
    conn: ConnId | None = None
    """The producer's connection (None: the hub's own record, a drop)."""
    stream: StreamId | None = None
    epoch: int = 0


Durable = Callable[[ConnId, StreamId, int], None]
"""``(conn, stream, epoch)``: a producer's frame is committed (the server's durability acks);
a failed commit resets the producer instead (the commit path's default answer)."""


class JournalRecorder:
    """The hub's recorder: each frame is encoded and validated *before* the hub changes state.

    ``prepare`` raises ``InvalidRecord`` for a frame the journal cannot store, or the first
    storage rule's refusal (``JournalUnavailable`` while commits fail, ``StorageError`` when
    the writer's queue is full: the hub refuses the frame, unchanged, and the event loop never
    waits for the disk); ``commit`` submits the prepared record once the hub has accepted the
    frame, with ``durable`` as its after-commit effect. Each record names its producer as
    ``<run>.<connection id>``:
    connection ids restart with every server run, so ``run`` (by default the start time in
    milliseconds, hex) keeps two runs' producers apart.
    """

    def __init__(
        self,
        path: CommitPath,
        encode: Encode = body_bytes,
        run: str | None = None,
        durable: Durable | None = None,
    ):
        self.path = path
        self.encode = encode
        self.run = run if run is not None else f"{time.time_ns() // 1_000_000:x}"
        self.durable = durable

    def prepare(self, stream: StreamId, conn: ConnId, frame: Frame[Body]) -> RecordCommit:
        self.path.refuse()
        try:
            record = frame_record(str(stream), frame, self.encode, f"{self.run}.{conn}")
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidRecord(
                f"the frame's body cannot be stored: {exc}", path="payload"
            ) from exc
        return partial(self.commit, Prepared(encode_record(record), conn, stream, record.epoch))

    def prepare_drop(self, stream: StreamId) -> RecordCommit:
        """The record that the hub dropped ``stream``'s state; ``StorageError`` when the
        writer cannot take it now (the hub keeps the state and tries again later)."""
        self.path.refuse()
        return partial(self.commit, Prepared(encode_record(StreamDropped(str(stream)))))

    def commit(self, prepared: Prepared) -> None:
        conn, durable = prepared.conn, self.durable
        if conn is None:  # the hub's own record: nobody to tell or reset
            self.path.submit(Commit(0, (prepared.record,)))
        elif durable is None:
            self.path.submit(Commit(conn, (prepared.record,)))
        else:
            after = partial(durable, conn, prepared.stream, prepared.epoch)
            self.path.submit(Commit(conn, (prepared.record,), (after,)))


def journal_hook(writer: GroupCommitWriter, encode: Encode = body_bytes) -> AcceptHook:
    """``on_accept(stream, conn, frame)`` that queues each accepted frame for the journal."""
    recorder = JournalRecorder(DirectPath(writer), encode)

    def on_accept(stream: StreamId, conn: ConnId, frame: Frame[Body]) -> None:
        recorder.prepare(stream, conn, frame)()

    return on_accept
