"""What octosync nodes say to each other over NATS: frames, heartbeats, snapshot requests,
writes and WVP resync requests passed to a stream's owner, and its producer's answers to
writers' requests passed back to the writer's node.

MsgPack, one tagged union, strict decoding. A stream frame carries the producer's lazily
message already encoded (``wire.msgpack``) in ``body``: the owner encodes it once and
publishes it once; each node decodes it once and its hub re-encodes per local view, as for a
local producer. Epochs and the claim revision ride beside the body so that the cluster core
decides (apply, drop, resync) without decoding it.

A WVP stream's frame (its name says its face: ``warp:<id>``) carries canonical CBOR instead,
as the journal stores it, graph and ops spliced verbatim: a diff is one WVP frame; a snapshot
is an array of the owner's snapshot and the diffs its hub received since (the hub cannot fold
WVP ops, so that replay is the state at ``to_epoch``), from ``from_epoch`` on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.errors import DecodeError
from octosync.ipc.messages import Delta, RemoteOp, RemoteOpResult, Snapshot
from octosync.stream_names import stream_face
from octosync.wire import msgpack as wire_msgpack
from octosync.wire import wvp
from octosync.wire.strict import Buffer, strict

DIALECT = "cluster"

Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]
NodeId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class ClusterFrame(msgspec.Struct, frozen=True, tag="frame"):
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
    """A subscriber's write, passed to the node whose producer owns the stream under
    ``claim`` (the writer's node checked its grants); ``body`` is, as ``wire.msgpack``, a
    ``cell_set`` Delta or a ``RemoteOp`` stamped there with the writer's connection (``peer``)
    and token subject."""

    node: NodeId
    stream: str
    claim: Epoch
    body: bytes


class Answer(msgspec.Struct, frozen=True, tag="answer"):
    """The owner's producer answers a ``RemoteOp`` that came from node ``to``: ``body`` is the
    ``RemoteOpResult`` as ``wire.msgpack``, its ``peer`` the writer's connection there."""

    node: NodeId
    stream: str
    body: bytes


class Resync(msgspec.Struct, frozen=True, tag="resync"):
    """A subscriber's WVP ``resync_request``, passed to the node whose producer owns the
    stream under ``claim`` (the asking node sends at most one per stream per
    ``resync_interval``); ``body`` is the request as a WVP packet."""

    node: NodeId
    stream: str
    claim: Epoch
    body: bytes


def decode_resync(resync: Resync) -> wvp.ResyncRequest:
    msg, _ts = wvp.decode(resync.body)
    if not isinstance(msg, wvp.ResyncRequest):
        raise DecodeError(f"{DIALECT}: a resync carries a WVP resync_request", path="$.body")
    return msg


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
    topgun: str = ""
    """Where TopGun clients reach this node (its ``/topgun`` WebSocket URL), for the
    partition map; empty: not known yet."""
    documents_held: int = 0
    """Shared documents this node holds (documents held by interest; 0 otherwise)."""
    documents: list[str] = []
    """The first of them by name (a bounded list, for ``octosync cluster status``)."""
    maps_held: int = 0
    """TopGun maps this node holds (maps held by interest; 0 otherwise)."""
    maps: list[str] = []
    """The first of them by name (a bounded list, for ``octosync cluster status``)."""


WvpFrame = wvp.WarpSnapshot | wvp.WarpDiff

ClusterMessage = ClusterFrame | SnapshotRequest | NoSnapshot | Heartbeat | Write | Resync | Answer

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[ClusterMessage] = msgspec.msgpack.Decoder(ClusterMessage)


def encode(message: ClusterMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> ClusterMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)


def frame_of(node: str, stream: str, claim: int, message: Snapshot | Delta) -> ClusterFrame:
    """The cluster frame for a lazily message, its body encoded once."""
    if isinstance(message, Snapshot):
        return ClusterFrame(
            node, stream, claim, "snapshot", message.epoch, message.epoch, encode_body(message)
        )
    return ClusterFrame(
        node, stream, claim, "delta", message.base_epoch, message.epoch, encode_body(message)
    )


def encode_body(message: Snapshot | Delta | RemoteOp | RemoteOpResult) -> bytes:
    return wire_msgpack.encode(message)


def decode_write(write: Write) -> Delta | RemoteOp:
    msg = wire_msgpack.decode(write.body)
    if not isinstance(msg, Delta | RemoteOp):
        raise DecodeError(f"{DIALECT}: a write carries a delta or a remote_op", path="$.body")
    return msg


def decode_answer(answer: Answer) -> RemoteOpResult:
    msg = wire_msgpack.decode(answer.body)
    if not isinstance(msg, RemoteOpResult) or msg.peer is None:
        what = "an answer carries a remote_op_result to a peer"
        raise DecodeError(f"{DIALECT}: {what}", path="$.body")
    return msg


def decode_body(frame: ClusterFrame) -> Snapshot | Delta:
    """The lazily message inside ``frame``; its kind and epochs must match the envelope.
    (The reader picks this or ``decode_wvp_body`` by the stream's face; a WVP body is not
    ``wire.msgpack``, so it fails here too.)"""
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


def wvp_frame_of(node: str, stream: str, claim: int, frames: Sequence[WvpFrame]) -> ClusterFrame:
    """The cluster frame for a WVP stream: one diff, or a snapshot and the diffs since it."""
    first, last = frames[0], frames[-1]
    if isinstance(first, wvp.WarpDiff):
        if len(frames) != 1:
            raise ValueError("a WVP cluster frame holds one diff, or starts with a snapshot")
        return ClusterFrame(
            node, stream, claim, "delta", first.from_epoch, first.to_epoch, wvp.encode_frame(first)
        )
    to_epoch = last.epoch if isinstance(last, wvp.WarpSnapshot) else last.to_epoch
    return ClusterFrame(
        node, stream, claim, "snapshot", first.epoch, to_epoch, wvp.encode_frames(frames)
    )


def decode_wvp_body(frame: ClusterFrame) -> list[WvpFrame]:
    """The WVP frames inside ``frame``: a diff matching the envelope, or a snapshot at
    ``from_epoch`` followed by gapless diffs up to ``to_epoch``."""
    if stream_face(frame.stream) != "wvp":
        raise DecodeError(f"{DIALECT}: a lazily stream carries lazily messages", path="$.stream")
    if frame.kind == "delta":
        diff = wvp.decode_frame(frame.body)
        if not isinstance(diff, wvp.WarpDiff) or (diff.from_epoch, diff.to_epoch) != (
            frame.from_epoch,
            frame.to_epoch,
        ):
            raise DecodeError(f"{DIALECT}: body is not the diff announced", path="$.body")
        if diff.to_epoch != diff.from_epoch + 1:
            raise DecodeError(f"{DIALECT}: a WVP diff advances one epoch", path="$.body")
        return [diff]
    frames = wvp.decode_frames(frame.body)
    if not frames or not isinstance(frames[0], wvp.WarpSnapshot):
        raise DecodeError(f"{DIALECT}: a WVP snapshot frame starts with a snapshot", path="$.body")
    epoch = frames[0].epoch
    if epoch != frame.from_epoch:
        raise DecodeError(f"{DIALECT}: body is not the snapshot announced", path="$.body")
    for i, f in enumerate(frames[1:], 1):
        if not isinstance(f, wvp.WarpDiff) or (f.from_epoch, f.to_epoch) != (epoch, epoch + 1):
            raise DecodeError(
                f"{DIALECT}: the diffs after a WVP snapshot are gapless", path=f"$.body[{i}]"
            )
        epoch = f.to_epoch
    if epoch != frame.to_epoch:
        raise DecodeError(f"{DIALECT}: body does not reach the epoch announced", path="$.body")
    return frames
