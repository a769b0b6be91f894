"""The op record: what clients send, what the server merges, what the journal stores.

Value bytes by op (MsgPack):
  PUT        the new value (LWW-Map)
  REMOVE     empty; a tombstone at ``ts`` (LWW-Map)
  OR_ADD     the added value; its unique tag is ``op_id`` (OR-Map, add-wins)
  OR_REMOVE  an array of the observed tags (``op_id`` of earlier OR_ADDs) it removes
  INC        a signed integer amount added to the PN counter ``key`` by ``origin``

Folding a set of records is order-free and duplicate-free: ``op_id`` identifies a record, and
every op's effect depends only on the records present, never on arrival order.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec

from octosync.crdt.timestamp import NodeName, Timestamp


class OpKind(StrEnum):
    PUT = "PUT"
    REMOVE = "REMOVE"
    OR_ADD = "OR_ADD"
    OR_REMOVE = "OR_REMOVE"
    INC = "INC"


MAX_MAP_NAME = 256
MapName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MAP_NAME)]
Key = Annotated[str, msgspec.Meta(max_length=4096)]
OpId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class OpRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One op (fields: see above). Untracked by the cycle collector: it holds only strings,
    bytes and a :class:`Timestamp`, and a server keeps one per key."""

    map: MapName
    key: Key
    op: OpKind
    value: bytes
    ts: Timestamp
    origin: NodeName
    op_id: OpId
