"""Chain frames (``chain.link_frames``) as length-prefixed MsgPack, decoded strictly. The
sockets that carry them are ``links.frames``'.
"""

from __future__ import annotations

from octosync.chain.link_frames import (
    AnyFrame,
    Copy,
    DeviceHello,
    Epoch,
    ForDevice,
    Forward,
    FromDevice,
    LinkFrame,
    PeerHello,
    PeerWelcome,
    Refused,
    Status,
    StatusRequest,
)
from octosync.wire.chain import ChainCodec
from octosync.wire.framing import HEADER
from octosync.wire.strict import Buffer

MAX_FRAME = 256 * 1024 * 1024
"""A ``Copy`` frame carries a whole replica."""

__all__ = [
    "CODEC",
    "MAX_FRAME",
    "AnyFrame",
    "Copy",
    "DeviceHello",
    "Epoch",
    "ForDevice",
    "Forward",
    "FromDevice",
    "LinkFrame",
    "PeerHello",
    "PeerWelcome",
    "Refused",
    "Status",
    "StatusRequest",
    "decode",
    "encode",
]

CODEC: ChainCodec[AnyFrame] = ChainCodec(AnyFrame, "msgpack")


def encode(frame: LinkFrame) -> bytes:
    """One frame with its u32 length prefix."""
    payload = CODEC.encode(frame)  # type: ignore[arg-type]
    return HEADER.pack(len(payload)) + payload


def decode(payload: Buffer) -> AnyFrame:
    return CODEC.decode(payload)
