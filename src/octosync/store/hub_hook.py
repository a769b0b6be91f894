"""Journal every frame the hub accepts: an ``on_accept`` hook for ``server.app.build_app``.

The hub hands its hook ``(stream, conn, frame)`` inline, before fan-out, and the hook must not
block: it submits to a :class:`GroupCommitWriter` and returns (the commit follows within one
group-commit round). The hub's frames are duck-typed here -- a snapshot has ``epoch``, a diff
``from_epoch`` / ``to_epoch``, both a ``body`` and an optional ``state_hash`` -- so the store
does not import the hub. ``encode`` turns a body into the bytes journalled (MsgPack by default;
msgspec encodes the state-plane Structs and decoded WVP maps alike)::

    writer = GroupCommitWriter(config.data_dir)
    app = build_app(config, on_accept=journal_hook(writer))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from octosync.errors import InvalidRecord
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import StreamFrame

Encode = Callable[[Any], bytes]


def frame_record(stream: str, frame: Any, encode: Encode = msgspec.msgpack.encode) -> StreamFrame:
    """The journal record of one accepted hub frame."""
    state_hash = getattr(frame, "state_hash", None)
    if hasattr(frame, "from_epoch") and hasattr(frame, "to_epoch"):
        base, epoch, snapshot = int(frame.from_epoch), int(frame.to_epoch), False
    elif hasattr(frame, "epoch"):
        base = epoch = int(frame.epoch)
        snapshot = True
    else:
        raise InvalidRecord(f"not a hub frame: {type(frame).__name__}", path="frame")
    return StreamFrame(
        stream=str(stream),
        base_epoch=base,
        epoch=epoch,
        snapshot=snapshot,
        payload=encode(frame.body),
        state_hash=state_hash,
    )


def journal_hook(
    writer: GroupCommitWriter, encode: Encode = msgspec.msgpack.encode
) -> Callable[[Any, Any, Any], None]:
    """``on_accept(stream, conn, frame)`` that queues each accepted frame for the journal."""

    def on_accept(stream: Any, conn: Any, frame: Any) -> None:
        writer.submit([frame_record(stream, frame, encode)])

    return on_accept
