"""What travels on a chain connection: length-prefixed MsgPack frames, each with the epoch.

The epoch lets a receiver fence a sender that is working from an older configuration (a link
that was removed cannot write). ``read_payload``/``read_frame`` are the only socket code here.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import msgspec

from octosync.chain.records import (
    ChainRecord,
    ChainStateMachine,
    DeviceToHead,
    HeadToDevice,
    LinkMessage,
)
from octosync.errors import Oversize
from octosync.wire.chain import ChainCodec
from octosync.wire.framing import HEADER, HEADER_SIZE, FrameDecoder

MAX_FRAME = 256 * 1024 * 1024
"""A ``Copy`` frame carries a whole replica."""

Epoch = Annotated[int, msgspec.Meta(ge=0)]


class Frame(ChainRecord, frozen=True):
    """Every frame: tagged by class name in ``Type``, with the sender's configuration epoch."""

    epoch: Epoch


class PeerHello(Frame, frozen=True):
    """Upstream link to downstream link: I am your predecessor in configuration ``epoch``."""

    sender: str


class PeerWelcome(Frame, frozen=True):
    """Downstream's answer: where its log ends, or that it needs a copy of the whole replica."""

    next_chain_sequencer: int
    need_copy: bool


class Copy(Frame, frozen=True):
    """The old tail's replica, sent to the link joining after it."""

    machine: ChainStateMachine


class Link(Frame, frozen=True):
    message: LinkMessage


class DeviceHello(Frame, frozen=True):
    device: str


class FromDevice(Frame, frozen=True):
    message: DeviceToHead


class ForDevice(Frame, frozen=True):
    message: HeadToDevice


class Refused(Frame, frozen=True):
    """The receiver will not talk: ``code`` is an error name (``StaleEpoch``, ``NotHead``...)."""

    code: str
    reason: str


class StatusRequest(Frame, frozen=True):
    pass


class Status(Frame, frozen=True):
    id: str
    role: str
    next_chain_sequencer: int
    trim: int
    next_state_sequencer: int
    acked_through: int
    live_events: int
    devices: int
    state: object = None


AnyFrame = (
    PeerHello
    | PeerWelcome
    | Copy
    | Link
    | DeviceHello
    | FromDevice
    | ForDevice
    | Refused
    | StatusRequest
    | Status
)
CODEC: ChainCodec[AnyFrame] = ChainCodec(AnyFrame, "msgpack")


def encode(frame: Frame) -> bytes:
    payload = CODEC.encode(frame)  # type: ignore[arg-type]
    return HEADER.pack(len(payload)) + payload


async def read_payload(reader: asyncio.StreamReader) -> bytes:
    """The next frame's encoded payload (``decode`` reads it); ``IncompleteReadError`` at end."""
    header = await reader.readexactly(HEADER_SIZE)
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise Oversize(f"frame of {size} bytes is above {MAX_FRAME}", path="length")
    return await reader.readexactly(size)


def decode(payload: bytes) -> AnyFrame:
    return CODEC.decode(payload)


READ_SIZE = 256 * 1024


class FrameReader:
    """Payloads from a stream in bulk: one read takes every frame the kernel holds, so a busy
    connection costs one wake-up per burst rather than two awaited reads per frame (split by
    ``wire.framing.FrameDecoder``, the server's u32 framing)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.decoder = FrameDecoder(MAX_FRAME)

    async def payloads(self) -> list[bytes]:
        """At least one payload; ``IncompleteReadError`` at end of stream (even mid-frame)."""
        while True:
            chunk = await self.reader.read(READ_SIZE)
            if not chunk:
                raise asyncio.IncompleteReadError(self.decoder.held, None)
            found = self.decoder.feed(chunk)
            if found:
                return found


async def read_frame(reader: asyncio.StreamReader) -> AnyFrame:
    """The next frame; ``IncompleteReadError`` at end of stream, typed errors for bad input."""
    return decode(await read_payload(reader))
