"""TopGun's Merkle-sync messages as frozen msgspec Structs (the wire layer encodes them).

They live beside the sync session that produces them, as the state-plane Structs live in
``ipc/``; :mod:`octosync.wire.topgun` includes them in its tagged union. Field names are
camelCase on the wire. Whole numbers that a JavaScript peer sends as float64 (every millis
value above 2^32 is) are accepted when integral and stored as ``int``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec

from octosync.crdt.timestamp import Timestamp

JsInt = int | float
"""An integer field that also accepts an integral float64; normalised to ``int`` on decode."""

Hash32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]


class TopGunStruct(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel", omit_defaults=True
):
    """Base of every TopGun Struct: strict, camelCase, absent optionals left out."""

    integral: ClassVar[tuple[str, ...]] = ()
    hash32: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.integral:
            value = getattr(self, name)
            if value is None:
                continue
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


class LeafRecord(TopGunStruct, frozen=True):
    key: str
    record: WireLWWRecord


class SyncInit(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_INIT"):
    map_name: str
    last_sync_timestamp: JsInt | None = None
    root_hash: JsInt | None = None
    bucket_hashes: dict[str, Hash32] | None = None

    integral = ("last_sync_timestamp", "root_hash")
    hash32 = ("root_hash",)


class SyncRespRootPayload(TopGunStruct, frozen=True):
    map_name: str
    root_hash: JsInt
    timestamp: WireTimestamp | None = None

    integral = ("root_hash",)
    hash32 = ("root_hash",)


class SyncRespRoot(TopGunStruct, frozen=True, tag_field="type", tag="SYNC_RESP_ROOT"):
    payload: SyncRespRootPayload


class BucketPath(TopGunStruct, frozen=True):
    map_name: str
    path: str


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
