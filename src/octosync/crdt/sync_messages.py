"""TopGun's Merkle-sync messages as frozen msgspec Structs (the wire layer encodes them).

They live beside the sync session that produces them, as the state-plane Structs live in
``ipc/``; :mod:`octosync.wire.topgun` includes them in its tagged union. Field names are
camelCase on the wire. Whole numbers that a JavaScript peer sends as float64 (every millis
value above 2^32 is) are accepted when integral and stored as ``int``, their bounds checked as
they decode (:mod:`octosync.js_numbers`).

octosync extension (leaf digests), all optional fields, so plain TopGun frames are unchanged:

* ``SYNC_INIT.leafDigests: true`` offers the extension; a responder that supports it echoes
  ``SYNC_RESP_ROOT.payload.leafDigests: true``. Without the echo the requester stays plain.
* ``MERKLE_REQ_BUCKET.payload.have`` (a :class:`LeafDigest`, only on a leaf path) lists what
  the requester already holds in that leaf: per key an 8-byte key digest and its HLC. The
  ``SYNC_RESP_LEAF`` then carries only the records the requester lacks or holds older, instead
  of the whole leaf; a request without ``have`` gets the whole leaf, as in TopGun.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from octosync.crdt.timestamp import Counter, Millis, NodeName, Timestamp
from octosync.js_numbers import JsCounter, JsHash32, JsUint, PostInit, int_post_init

Hash32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
KEY_DIGEST_SIZE = 8
"""Bytes per key digest in :class:`LeafDigest` (64 bits: see ``sync.py`` on collisions)."""


class TopGunStruct(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """Base of every TopGun Struct: strict, camelCase, absent optionals left out. Untracked
    by the cycle collector (``gc=False``): a message is a tree decoded from bytes or built
    from values, never a cycle, and a client batch decodes into hundreds of them, which
    would otherwise trigger collections that walk the server's whole heap.

    Whole numbers (:mod:`octosync.js_numbers`) are checked by msgspec as it decodes; a class
    with such fields gets a ``__post_init__`` that turns the integral floats that passed into
    ``int`` (then runs the class's own ``__post_init__``, if it wrote one). msgspec calls it at
    every decode and construction, so the classes without such fields get none."""

    _own_post_init: ClassVar[PostInit | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None:
            cls._own_post_init = own
        post_init = int_post_init(cls, cls._own_post_init)
        if post_init is not None:
            cls.__post_init__ = post_init  # type: ignore[attr-defined]

    @classmethod
    def _wire_name(cls, name: str) -> str:
        return cls.__struct_encode_fields__[cls.__struct_fields__.index(name)]


class WireTimestamp(TopGunStruct, frozen=True):
    millis: JsUint
    counter: JsCounter
    node_id: str

    def to_ts(self) -> Timestamp:
        return Timestamp(self.millis, self.counter, self.node_id)

    @classmethod
    def of(cls, ts: Timestamp) -> WireTimestamp:
        return cls(ts.millis, ts.counter, ts.node_id)


class WireLWWRecord(TopGunStruct, frozen=True):
    """``value`` is kept as its MsgPack bytes; MsgPack nil marks a tombstone."""

    value: msgspec.Raw
    timestamp: WireTimestamp
    ttl_ms: JsUint | None = None


class LeafRecord(TopGunStruct, frozen=True):
    key: str
    record: WireLWWRecord


class SyncInit(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_INIT"):
    map_name: str
    last_sync_timestamp: JsUint | None = None
    root_hash: JsHash32 | None = None
    bucket_hashes: dict[str, Hash32] | None = None
    leaf_digests: bool | None = None  # octosync extension: offer leaf digests


class SyncRespRootPayload(TopGunStruct, frozen=True):
    map_name: str
    root_hash: JsHash32
    timestamp: WireTimestamp | None = None
    leaf_digests: bool | None = None  # octosync extension: leaf digests accepted


class SyncRespRoot(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_RESP_ROOT"):
    payload: SyncRespRootPayload


class LeafDigest(TopGunStruct, frozen=True):
    """octosync extension: the ``(key digest, HLC)`` of every record a requester holds in a leaf.

    Columnar so that MsgPack spends few bytes per entry: ``keys`` packs one
    ``KEY_DIGEST_SIZE``-byte digest per entry; entries are sorted by millis and ``millis[i]``
    is the gap to the previous entry's millis (to ``baseMillis`` for the first); ``nodes[i]``
    indexes ``nodeIds``. Every column has one item per digest, or the frame is rejected.
    """

    keys: bytes
    base_millis: JsUint
    millis: list[Millis]
    counters: list[Counter]
    node_ids: list[NodeName]
    nodes: list[Annotated[int, msgspec.Meta(ge=0)]]

    def __post_init__(self) -> None:
        n, rest = divmod(len(self.keys), KEY_DIGEST_SIZE)
        if rest:
            raise ValueError(f"keys: {len(self.keys)} bytes is not a whole number of digests")
        for name in ("millis", "counters", "nodes"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{self._wire_name(name)}: expected {n} items, one per key")
        if self.nodes and max(self.nodes) >= len(self.node_ids):
            raise ValueError(f"nodes: index past the {len(self.node_ids)} nodeIds")
        if self.base_millis + sum(self.millis) > 2**53:
            raise ValueError("millis: a timestamp beyond 2^53")

    @classmethod
    def of(cls, entries: list[tuple[bytes, Timestamp]]) -> LeafDigest:
        """Pack ``(key digest, HLC)`` pairs (each digest ``KEY_DIGEST_SIZE`` bytes)."""
        entries = sorted(entries, key=lambda e: e[1].millis)
        node_index: dict[str, int] = {}
        base = prev = entries[0][1].millis if entries else 0
        gaps: list[int] = []
        for _, ts in entries:
            gaps.append(ts.millis - prev)
            prev = ts.millis
        nodes = [node_index.setdefault(ts.node_id, len(node_index)) for _, ts in entries]
        return cls(
            b"".join(d for d, _ in entries),
            base,
            gaps,
            [ts.counter for _, ts in entries],
            list(node_index),
            nodes,
        )

    def entries(self) -> list[tuple[bytes, Timestamp]]:
        """The ``(key digest, HLC)`` pairs, in wire order."""
        out: list[tuple[bytes, Timestamp]] = []
        keys, size, ids = self.keys, KEY_DIGEST_SIZE, self.node_ids
        millis = self.base_millis
        for i, (gap, counter, node) in enumerate(
            zip(self.millis, self.counters, self.nodes, strict=True)
        ):
            millis += gap
            out.append((keys[i * size : (i + 1) * size], Timestamp(millis, counter, ids[node])))
        return out


class BucketPath(TopGunStruct, frozen=True):
    map_name: str
    path: str
    have: LeafDigest | None = None  # octosync extension, leaf paths only


class MerkleReqBucket(TopGunStruct, frozen=True, tag_field="type", tag="MERKLE_REQ_BUCKET"):
    payload: BucketPath


class SyncRespBucketsPayload(TopGunStruct, frozen=True):
    map_name: str
    buckets: dict[str, Hash32]
    path: str | None = None


class SyncRespBuckets(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_RESP_BUCKETS"):
    payload: SyncRespBucketsPayload


class SyncRespLeafPayload(TopGunStruct, frozen=True):
    map_name: str
    path: str
    records: list[LeafRecord]


class SyncRespLeaf(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_RESP_LEAF"):
    payload: SyncRespLeafPayload


class SyncResetPayload(TopGunStruct, frozen=True):
    map_name: str
    reason: str | None = None


class SyncResetRequired(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_RESET_REQUIRED"):
    payload: SyncResetPayload


SyncMessage = (
    SyncInit | SyncRespRoot | MerkleReqBucket | SyncRespBuckets | SyncRespLeaf | SyncResetRequired
)

NIL = msgspec.Raw(b"\xc0")
_ENC = msgspec.msgpack.Encoder()


def raw_value(value: Any) -> msgspec.Raw:
    return NIL if value is None else msgspec.Raw(_ENC.encode(value))
