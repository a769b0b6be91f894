"""What octosync nodes say to each other about shared documents: op batches and repair.

MsgPack, one tagged union, strict decoding. A :class:`PlaneBatch` is one JetStream message of
the cluster's plane op stream: ops of one document a node accepted (after its write checks,
made once, there), as the plane's own ``CrdtOp``, so every node merges exactly what the
writing node did.

Repair (anti-entropy, ``cluster/planes.py``) is a broadcast and a request/reply between two
nodes: :class:`PlaneRoots` says each settled document's root; a node whose root differs sends
its per-bucket digests in a :class:`RepairRequest` and gets the ops of the differing buckets
back in pages (:class:`RepairReply`).

With documents held by interest, each :class:`PlaneBatch` goes to its document's own subject,
and a :class:`DocSnapshot` per document sits in a key-value bucket (``links/cluster_held.py``).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.ipc.messages import CrdtOp, NodeId
from octosync.wire.strict import Buffer, strict

DIALECT = "cluster-planes"
BUCKETS = 256
"""Buckets of a document's digest (a request carries one 64-bit digest per bucket)."""

NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
StreamName = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
Hash64 = Annotated[int, msgspec.Meta(ge=0)]
"""A 64-bit hash (msgspec itself refuses integers beyond the u64 range)."""
EntryAt = tuple[NodeId, str]
"""An entry's ``(node, key)``: where a page of repair ops resumes."""


class PlaneBatch(msgspec.Struct, frozen=True, tag="plane-ops"):
    """Ops of document ``stream`` accepted on a node; ``node`` names that node's process (one
    name per run)."""

    node: NodeName
    stream: StreamName
    ops: list[CrdtOp]


class PlaneRoots(msgspec.Struct, frozen=True, tag="plane-roots"):
    """The root of each document ``node`` holds that did not change there for a while."""

    node: NodeName
    roots: dict[StreamName, Hash64]


class RepairRequest(msgspec.Struct, frozen=True, tag="plane-repair?"):
    """The requester's digest per bucket of ``stream``; ``after``: the page to resume from."""

    node: NodeName
    stream: StreamName
    digests: Annotated[list[Hash64], msgspec.Meta(min_length=BUCKETS, max_length=BUCKETS)]
    after: EntryAt | None = None


class RepairReply(msgspec.Struct, frozen=True, tag="plane-repair"):
    """The answering node's ops of every bucket whose digest differs, in entry order
    (``resume``: cut at the size bound; ask again from there)."""

    stream: StreamName
    ops: list[CrdtOp]
    resume: EntryAt | None = None


class DocSnapshot(msgspec.Struct, frozen=True, tag="plane-snapshot"):
    """A document compacted: every entry a node held once it had taken the document's subject
    through stream sequence ``position`` (a load takes it, then the subject after it)."""

    stream: StreamName
    position: Annotated[int, msgspec.Meta(ge=0)]
    ops: list[CrdtOp]


PlanesMessage = PlaneBatch | PlaneRoots | RepairRequest | RepairReply | DocSnapshot

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[PlanesMessage] = msgspec.msgpack.Decoder(PlanesMessage)


def encode(message: PlanesMessage) -> bytes:
    return _encoder.encode(message)


def decode(data: Buffer) -> PlanesMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)
