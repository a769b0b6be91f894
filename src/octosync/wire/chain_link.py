"""What travels on a chain connection (link to link, device to head): length-prefixed MsgPack
frames, each with the sender's configuration epoch.

The epoch lets a receiver fence a sender that is working from an older configuration (a link
that was removed cannot write). The sockets that carry them are ``links.frames``'.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.chain.records import (
    ChainRecord,
    ChainStateMachine,
    DeviceToHead,
    HeadToDevice,
    LinkMessage,
)
from octosync.wire.chain import ChainCodec
from octosync.wire.framing import HEADER
from octosync.wire.strict import Buffer

MAX_FRAME = 256 * 1024 * 1024
"""A ``Copy`` frame carries a whole replica."""

Epoch = Annotated[int, msgspec.Meta(ge=0)]


class LinkFrame(ChainRecord, frozen=True):
    """Every frame: tagged by class name in ``Type``, with the sender's configuration epoch."""

    epoch: Epoch


class PeerHello(LinkFrame, frozen=True):
    """Upstream link to downstream link: I am your predecessor in configuration ``epoch``."""

    sender: str


class PeerWelcome(LinkFrame, frozen=True):
    """Downstream's answer: where its log ends, or that it needs a copy of the whole replica."""

    next_chain_sequencer: int
    need_copy: bool


class Copy(LinkFrame, frozen=True):
    """The old tail's replica, sent to the link joining after it."""

    machine: ChainStateMachine


class Forward(LinkFrame, frozen=True):
    """A chain message passed down the chain to the next link."""

    message: LinkMessage


class DeviceHello(LinkFrame, frozen=True):
    device: str


class FromDevice(LinkFrame, frozen=True):
    message: DeviceToHead


class ForDevice(LinkFrame, frozen=True):
    message: HeadToDevice


class Refused(LinkFrame, frozen=True):
    """The receiver will not talk: ``code`` is an error name (``StaleEpoch``, ``NotHead``...)."""

    code: str
    reason: str


class StatusRequest(LinkFrame, frozen=True):
    pass


class Status(LinkFrame, frozen=True):
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
    | Forward
    | DeviceHello
    | FromDevice
    | ForDevice
    | Refused
    | StatusRequest
    | Status
)
CODEC: ChainCodec[AnyFrame] = ChainCodec(AnyFrame, "msgpack")


def encode(frame: LinkFrame) -> bytes:
    """One frame with its u32 length prefix."""
    payload = CODEC.encode(frame)  # type: ignore[arg-type]
    return HEADER.pack(len(payload)) + payload


def decode(payload: Buffer) -> AnyFrame:
    return CODEC.decode(payload)
