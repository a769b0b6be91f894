"""What octosync nodes say to each other over NATS: frames, heartbeats, snapshot requests.

MsgPack, one tagged union, strict decoding. A stream frame carries the producer's lazily
message already encoded (``wire.msgpack``) in ``body``: the owner encodes it once and
publishes it once; each node decodes it once and its hub re-encodes per local view, as for a
local producer. Epochs and the claim revision ride beside the body so that the cluster core
decides (apply, drop, resync) without decoding it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.errors import DecodeError
from octosync.ipc.messages import Delta, Snapshot
from octosync.wire import msgpack as wire_msgpack
from octosync.wire.strict import Buffer, strict

DIALECT = "cluster"

Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]
NodeId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class StreamFrame(msgspec.Struct, frozen=True, tag="frame"):
    """One frame the owner's hub accepted (``kind``), fenced by the owner's claim revision."""

    node: NodeId
    stream: str
    claim: Epoch
    kind: Literal["snapshot", "delta"]
    from_epoch: Epoch
    to_epoch: Epoch
    body: bytes


class SnapshotRequest(msgspec.Struct, frozen=True, tag="snapshot_request"):
    node: NodeId
    stream: str


class NoSnapshot(msgspec.Struct, frozen=True, tag="no_snapshot"):
    """The answer of a node that does not own the stream (or holds no state for it)."""

    node: NodeId
    stream: str


class Write(msgspec.Struct, frozen=True, tag="write"):
    """A subscriber's ``cell_set`` write, passed to the node whose producer owns the stream
    under ``claim`` (the writer's node checked its grant); ``body`` is the Delta as
    ``wire.msgpack``."""

    node: NodeId
    stream: str
    claim: Epoch
    body: bytes


class StreamLoad(msgspec.Struct, frozen=True):
    """One stream as a node sees it, for ``octosync cluster status``."""

    epoch: Epoch | None
    subscribers: int
    claim: Epoch = 0
    """The claim revision under which this node owns the stream (0: it does not)."""


class Heartbeat(msgspec.Struct, frozen=True, tag="heartbeat"):
    node: NodeId
    url: str
    streams: dict[str, StreamLoad]
    connections: int
    released: dict[str, Epoch] = {}
    """Streams this node released, with the claim it held (so nodes whose ownership watch
    was lost, and that follow none of its frames, still see the release)."""


ClusterMessage = StreamFrame | SnapshotRequest | NoSnapshot | Heartbeat | Write

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[ClusterMessage] = msgspec.msgpack.Decoder(ClusterMessage)


def encode(message: ClusterMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> ClusterMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)


def frame_of(node: str, stream: str, claim: int, message: Snapshot | Delta) -> StreamFrame:
    """The cluster frame for a lazily message, its body encoded once."""
    if isinstance(message, Snapshot):
        return StreamFrame(
            node, stream, claim, "snapshot", message.epoch, message.epoch, encode_body(message)
        )
    return StreamFrame(
        node, stream, claim, "delta", message.base_epoch, message.epoch, encode_body(message)
    )


def encode_body(message: Snapshot | Delta) -> bytes:
    return wire_msgpack.encode(message)


def decode_write(write: Write) -> Delta:
    msg = wire_msgpack.decode(write.body)
    if not isinstance(msg, Delta):
        raise DecodeError(f"{DIALECT}: a write carries a delta", path="$.body")
    return msg


def decode_body(frame: StreamFrame) -> Snapshot | Delta:
    """The lazily message inside ``frame``; its kind and epochs must match the envelope."""
    msg = wire_msgpack.decode(frame.body)
    if frame.kind == "snapshot":
        if not isinstance(msg, Snapshot) or msg.epoch != frame.to_epoch:
            raise DecodeError(f"{DIALECT}: body is not the snapshot announced", path="$.body")
        return msg
    if not isinstance(msg, Delta) or (msg.base_epoch, msg.epoch) != (
        frame.from_epoch,
        frame.to_epoch,
    ):
        raise DecodeError(f"{DIALECT}: body is not the delta announced", path="$.body")
    return msg
