"""What octosync nodes say to each other about TopGun maps: op batches and Merkle repair.

MsgPack, one tagged union, strict decoding. An :class:`OpBatch` is one JetStream message of the
cluster's op stream: the op records one node accepted, as the journal's own ``OpRecord``, so a
receiving node folds (and journals) exactly what the writing node did. The sender encodes the
records once, for its journal; the batch splices those bytes in (:func:`encode_batch`).

Repair (anti-entropy) is request/reply between two nodes: :class:`MapRoots` (broadcast) says
each settled map's Merkle root; a node whose root differs walks the other's tree with
:class:`BucketsRequest` and pulls the records of differing leaves with :class:`LeavesRequest`,
sending for each leaf the entry hashes it holds so that only what differs comes back.

With maps held by interest, a :class:`MapSnapshot` per map sits in a key-value bucket
(``links/cluster_held_maps.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from octosync.crdt.op import OpRecord
from octosync.wire.strict import Buffer, strict

DIALECT = "cluster-maps"

NodeId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
MapName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Hash = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
Path = Annotated[str, msgspec.Meta(max_length=8, pattern="^[0-9a-f]*$")]
MAX_PATHS = 4096
"""Paths in one request: a depth-3 tree has 4,096 leaves."""


class OpBatch(msgspec.Struct, frozen=True, tag="ops"):
    """Op records accepted on a node (one map per batch), after that node's grant checks;
    ``node`` names the node's process that published them (one name per run)."""

    node: NodeId
    records: list[OpRecord]


class MapRoots(msgspec.Struct, frozen=True, tag="roots"):
    """The Merkle root of each map ``node`` holds that had no write for a while."""

    node: NodeId
    roots: dict[MapName, Hash]


class BucketsRequest(msgspec.Struct, frozen=True, tag="buckets?"):
    node: NodeId
    map: MapName
    paths: Annotated[list[Path], msgspec.Meta(max_length=MAX_PATHS)]


class BucketsReply(msgspec.Struct, frozen=True, tag="buckets"):
    """Per inner node asked for: its non-zero children's hashes by hex digit."""

    map: MapName
    buckets: dict[Path, dict[Path, Hash]]


class LeavesRequest(msgspec.Struct, frozen=True, tag="leaves?"):
    """Per leaf path: ``key -> entry hash`` of what the requester holds there."""

    node: NodeId
    map: MapName
    have: Annotated[dict[Path, dict[str, Hash]], msgspec.Meta(max_length=MAX_PATHS)]


class LeavesReply(msgspec.Struct, frozen=True, tag="leaves"):
    """The records carrying every key whose entry hash the requester lacks or holds otherwise
    (``complete`` False: cut at the size bound, the rest comes at a later round)."""

    map: MapName
    records: list[OpRecord]
    complete: bool = True


class Refused(msgspec.Struct, frozen=True, tag="refused"):
    """A request the node would not answer (a bad path), with the reason."""

    reason: str


class MapSnapshot(msgspec.Struct, frozen=True, tag="map-snapshot"):
    """A map compacted (maps held by interest): the records carrying its state once a node had
    taken the map's subject through stream sequence ``position`` (a load folds them, then
    takes the subject after it)."""

    map: MapName
    position: Annotated[int, msgspec.Meta(ge=0)]
    records: list[OpRecord]


MapsMessage = (
    OpBatch
    | MapRoots
    | BucketsRequest
    | BucketsReply
    | LeavesRequest
    | LeavesReply
    | Refused
    | MapSnapshot
)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[MapsMessage] = msgspec.msgpack.Decoder(MapsMessage)


class _RawBatch(msgspec.Struct, frozen=True, tag="ops"):
    node: str
    records: list[msgspec.Raw]


def encode(message: MapsMessage) -> bytes:
    return _encoder.encode(message)


def encode_batch(node: str, bodies: Sequence[bytes]) -> bytes:
    """An :class:`OpBatch` from op records already encoded (the journal's bodies), spliced in."""
    return _encoder.encode(_RawBatch(node, [msgspec.Raw(b) for b in bodies]))


def decode(data: Buffer) -> MapsMessage:
    return strict(_decoder.decode, data, dialect=DIALECT)
