"""What octosync nodes say to each other about presence and awareness: core NATS, never stored.

Each document's values go on its own subject (``octosync.<cluster>.presence.<token>``), which a
node follows only while its own connections are members of the document. A
:class:`PresenceOps` carries values set (or ended) through the sending node's connections; a
:class:`PresenceAsk` is sent by a node that starts following a document, and every other
follower answers with the values its connections hold, so a member joining on one node sees
the others' presence at once rather than at their next heartbeat.

MsgPack, one tagged union, strict decoding.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.ipc.messages import CrdtOp
from octosync.wire.cluster_planes import NodeName, StreamName
from octosync.wire.strict import Buffer, strict

DIALECT = "cluster-presence"
MAX_OPS = 128
"""Values per message: 128 at the 4 KiB value bound stays well under NATS's 1 MiB payload."""


class PresenceOps(msgspec.Struct, frozen=True, tag="presence-ops"):
    """Values of document ``stream`` set or ended through node ``node``'s connections."""

    node: NodeName
    stream: StreamName
    ops: Annotated[list[CrdtOp], msgspec.Meta(min_length=1, max_length=MAX_OPS)]


class PresenceAsk(msgspec.Struct, frozen=True, tag="presence?"):
    """Node ``node`` started following ``stream``: followers answer with their values."""

    node: NodeName
    stream: StreamName


PresenceMessage = PresenceOps | PresenceAsk

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[PresenceMessage] = msgspec.msgpack.Decoder(PresenceMessage)


def encode(message: PresenceMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> PresenceMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)
