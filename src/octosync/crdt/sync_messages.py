"""TopGun's Merkle-sync messages as frozen msgspec Structs (the wire layer encodes them).

They live beside the sync session that produces them, as the state-plane Structs live in
``ipc/``; :mod:`octosync.wire.topgun` includes them in its tagged union. Field names are
camelCase on the wire. Whole numbers that a JavaScript peer sends as float64 (every millis
value above 2^32 is) are accepted when integral and stored as ``int``.

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

JsInt = int | float
"""An integer field that also accepts an integral float64; normalised to ``int`` on decode."""

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
    would otherwise trigger collections that walk the server's whole heap."""

    integral: ClassVar[tuple[str, ...]] = ()
    hash32: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Only a Struct with integral fields gets the check as its ``__post_init__``: msgspec
        calls one at every decode and construction, and most TopGun Structs have none."""
        super().__init_subclass__(**kwargs)
        if cls.integral and "__post_init__" not in cls.__dict__:
            cls.__post_init__ = cls._check_integral  # type: ignore[attr-defined]

    def _check_integral(self) -> None:
        for name in self.integral:
            value = getattr(self, name)
            if value is None or (type(value) is int and value >= 0 and name not in self.hash32):
                continue  # the common case, checked first (every op carries timestamps)
            if value < 0 or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(f"{self._wire_name(name)}: expected a non-negative integer")
            if isinstance(value, float):
                msgspec.structs.force_setattr(self, name, int(value))
            if name in self.hash32 and value > 2**32 - 1:
                raise ValueError(f"{self._wire_name(name)}: a hash is at most 2^32 - 1")

    @classmethod
    def _wire_name(cls, name: str) -> str:
        return cls.__struct_encode_fields__[cls.__struct_fields__.index(name)]


class WireTimestamp(TopGunStruct, frozen=True):
    millis: JsInt
    counter: JsInt
    node_id: str

    integral = ("millis", "counter")

    def __post_init__(self) -> None:
        m, c = self.millis, self.counter  # two of these in every op: the common case first
        if type(m) is not int or type(c) is not int or m < 0 or c < 0:
            self._check_integral()

    def to_ts(self) -> Timestamp:
        return Timestamp(int(self.millis), int(self.counter), self.node_id)

    @classmethod
    def of(cls, ts: Timestamp) -> WireTimestamp:
        return cls(ts.millis, ts.counter, ts.node_id)


class WireLWWRecord(TopGunStruct, frozen=True):
    """``value`` is kept as its MsgPack bytes; MsgPack nil marks a tombstone."""

    value: msgspec.Raw
    timestamp: WireTimestamp
    ttl_ms: JsInt | None = None

    integral = ("ttl_ms",)

    def __post_init__(self) -> None:
        if self.ttl_ms is not None:  # absent in nearly every record: no check to run
            self._check_integral()


class LeafRecord(TopGunStruct, frozen=True):
    key: str
    record: WireLWWRecord


class SyncInit(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_INIT"):
    map_name: str
    last_sync_timestamp: JsInt | None = None
    root_hash: JsInt | None = None
    bucket_hashes: dict[str, Hash32] | None = None
    leaf_digests: bool | None = None  # octosync extension: offer leaf digests

    integral = ("last_sync_timestamp", "root_hash")
    hash32 = ("root_hash",)


class SyncRespRootPayload(TopGunStruct, frozen=True):
    map_name: str
    root_hash: JsInt
    timestamp: WireTimestamp | None = None
    leaf_digests: bool | None = None  # octosync extension: leaf digests accepted

    integral = ("root_hash",)
    hash32 = ("root_hash",)


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
    base_millis: JsInt
    millis: list[Millis]
    counters: list[Counter]
    node_ids: list[NodeName]
    nodes: list[Annotated[int, msgspec.Meta(ge=0)]]

    integral = ("base_millis",)

    def __post_init__(self) -> None:
        self._check_integral()
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
        millis = int(self.base_millis)
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
