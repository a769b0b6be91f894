"""What octosync nodes say to each other about ``/yjs`` documents: updates and repair.

MsgPack, one tagged union, strict decoding. A :class:`YjsBatch` is one JetStream message of
the cluster's Yjs op stream: updates of one document a node accepted (checked there, by
pycrdt), as the Yjs bytes themselves, so every node applies exactly what the writing node did.

Repair (anti-entropy, ``cluster/yjs.py``) is a broadcast and a push: :class:`YjsVectors` says,
for settled documents, each one's state vector and a hash of its delete set; a node whose
document differs sends the sender what it lacks (:class:`YjsDiff`, ``Doc.get_update`` of that
state vector), and the sender does the same when it hears this node's vectors.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.wire.strict import Buffer, strict

DIALECT = "cluster-yjs"

NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
DocumentName = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
Hash64 = Annotated[int, msgspec.Meta(ge=0)]


class YjsBatch(msgspec.Struct, frozen=True, tag="yjs-updates"):
    """Updates of ``document`` accepted on a node; ``node`` names that node's process (one
    name per run)."""

    node: NodeName
    document: DocumentName
    updates: list[bytes]


class Vector(msgspec.Struct, frozen=True, array_like=True):
    """One document's state vector (Yjs encoding) and a hash of its delete set: equal on two
    nodes when they hold the same document (deletions do not move a state vector)."""

    state: bytes
    deleted: Hash64


class YjsVectors(msgspec.Struct, frozen=True, tag="yjs-vectors"):
    """Settled documents of ``node``, each with its :class:`Vector`."""

    node: NodeName
    vectors: dict[DocumentName, Vector]


class YjsDiff(msgspec.Struct, frozen=True, tag="yjs-diff"):
    """What ``node`` holds of ``document`` that the recipient's vector lacks: one update, or
    part ``part`` of ``parts`` of it (a diff past a message's bound goes in pieces, in order,
    put together by the recipient)."""

    node: NodeName
    document: DocumentName
    update: bytes
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    parts: Annotated[int, msgspec.Meta(ge=1)] = 1


YjsClusterMessage = YjsBatch | YjsVectors | YjsDiff

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[YjsClusterMessage] = msgspec.msgpack.Decoder(YjsClusterMessage)


def encode(message: YjsClusterMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> YjsClusterMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)
