"""Journal every frame the hub accepts: an ``on_accept`` hook for ``server.app.build_app``.

The hub hands its hook ``(stream, conn, frame)`` inline, before fan-out, and the hook must not
block: it submits to a :class:`GroupCommitWriter` and returns (the commit follows within one
group-commit round), so frames reach the journal in the order the hub accepted them.
A frame that carries the producer's own bytes (``Sent``: every lazily frame from a face) is
journalled as those bytes with their dialect; ``encode`` serves the rest (``body_bytes`` by
default: a WVP frame as its canonical CBOR, ``wvp.encode_frame``, which splices the producer's
raw graph and ops; a frame built in-process as MsgPack). ``serve`` wires a ``JournalRecorder``
into the hub.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, cast

import msgspec

from octosync.errors import InvalidRecord
from octosync.hub.model import DiffFrame, SnapshotFrame
from octosync.store.journal import GroupCommitWriter, check_room
from octosync.store.records import (
    EncodedRecord,
    FrameCodec,
    StreamDropped,
    StreamFrame,
    encode_record,
)
from octosync.wire import wvp

Encode = Callable[[Any], bytes]


def body_bytes(body: Any) -> bytes:
    """The journalled form of a frame body, per face (see the module docstring)."""
    if isinstance(body, wvp.WarpSnapshot | wvp.WarpDiff):
        return wvp.encode_frame(body)
    return msgspec.msgpack.encode(body)


def frame_record(
    stream: str, frame: Any, encode: Encode = body_bytes, producer: str | None = None
) -> StreamFrame:
    """The journal record of one accepted hub frame."""
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
    conn: Any = None
    """The producer's connection (None: the hub's own record, a drop)."""
    stream: Any = None
    epoch: int = 0


Watch = Callable[[concurrent.futures.Future[list[int]], Prepared], None]
"""Told of each queued frame's commit future (the server: durability acks, or a reset of the
producer whose frame could not be written)."""


class JournalRecorder:
    """The hub's recorder: each frame is encoded and validated *before* the hub changes state.

    ``prepare`` raises ``InvalidRecord`` for a frame the journal cannot store,
    ``JournalUnavailable`` while commits fail, or ``StorageError`` when the writer's queue is
    full (the hub refuses the frame, unchanged: the event loop never waits for the disk);
    ``commit`` queues the prepared record once the hub has accepted the frame and hands its
    future to ``watch``. Each record names its producer as ``<run>.<connection id>``:
    connection ids restart with every server run, so ``run`` (by default the start time in
    milliseconds, hex) keeps two runs' producers apart.
    """

    def __init__(
        self,
        writer: GroupCommitWriter,
        encode: Encode = body_bytes,
        run: str | None = None,
        watch: Watch | None = None,
    ):
        self.writer = writer
        self.encode = encode
        self.run = run if run is not None else f"{time.time_ns() // 1_000_000:x}"
        self.watch = watch

    def prepare(self, stream: Any, conn: Any, frame: Any) -> Prepared:
        check_room(self.writer)
        try:
            record = frame_record(stream, frame, self.encode, f"{self.run}.{conn}")
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidRecord(
                f"the frame's body cannot be stored: {exc}", path="payload"
            ) from exc
        return Prepared(encode_record(record), conn, stream, record.epoch)

    def prepare_drop(self, stream: Any) -> Prepared:
        """The record that the hub dropped ``stream``'s state; ``StorageError`` when the
        writer cannot take it now (the hub keeps the state and tries again later)."""
        check_room(self.writer)
        return Prepared(encode_record(StreamDropped(str(stream))))

    def commit(self, prepared: Prepared) -> None:
        future = self.writer.submit_encoded([prepared.record], block=False)
        if self.watch is not None and prepared.conn is not None:
            self.watch(future, prepared)


def journal_hook(
    writer: GroupCommitWriter, encode: Encode = body_bytes
) -> Callable[[Any, Any, Any], None]:
    """``on_accept(stream, conn, frame)`` that queues each accepted frame for the journal."""
    recorder = JournalRecorder(writer, encode)

    def on_accept(stream: Any, conn: Any, frame: Any) -> None:
        recorder.commit(recorder.prepare(stream, conn, frame))

    return on_accept
