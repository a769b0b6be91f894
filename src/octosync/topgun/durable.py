"""The server's own TopGun state kept in the journal beside the maps: fencing tokens, counters.

Both are journaled as ordinary LWW ``PUT`` op records in maps under a reserved prefix, so the
journal, its trim, the Parquet export, ``pipeline compact`` and the restart from a compaction
carry them with no new record kind. Each record holds a whole state, and a later state always
dominates an earlier one (tokens only grow, PN counters only merge upward), so the LWW winner,
the one record a compaction keeps, is all a restart needs:

- ``$topgun/locks`` key ``fencing-token``: the highest fencing token granted; a restarted
  server grants from the next one, so a guarded resource never sees a token twice.
- ``$topgun/counters`` key = counter name: ``{positive, negative}`` per node after a merge.
- ``$topgun/cluster`` key ``maps-position``: in a cluster, the sequence of the cluster's op
  stream (``cluster.maps``) that this node applied and journaled through; a restarted node
  replays the stream from the next one. Positions only grow.

Clients may not read or write maps under the prefix (:func:`is_reserved`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from octosync.crdt.fold import MapStore
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import JournalCorrupt

RESERVED_PREFIX: Final = "$topgun/"
LOCKS_MAP: Final = f"{RESERVED_PREFIX}locks"
COUNTERS_MAP: Final = f"{RESERVED_PREFIX}counters"
FENCE_KEY: Final = "fencing-token"
CLUSTER_MAP: Final = f"{RESERVED_PREFIX}cluster"
POSITION_KEY: Final = "maps-position"


class CounterSides(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    positive: dict[str, int]
    negative: dict[str, int]


_ENC = msgspec.msgpack.Encoder()
_TOKEN = msgspec.msgpack.Decoder(int)
_SIDES = msgspec.msgpack.Decoder(CounterSides)


def is_reserved(map_name: str) -> bool:
    return map_name.startswith(RESERVED_PREFIX)


def _put(map_name: str, key: str, value: bytes, ts: Timestamp) -> OpRecord:
    return OpRecord(map_name, key, OpKind.PUT, value, ts, ts.node_id, str(ts))


def fence_record(token: int, ts: Timestamp) -> OpRecord:
    """The record saying every token up to ``token`` has been granted."""
    return _put(LOCKS_MAP, FENCE_KEY, _ENC.encode(token), ts)


def position_record(seq: int, ts: Timestamp) -> OpRecord:
    """The record saying the cluster's op stream is applied and journaled through ``seq``."""
    return _put(CLUSTER_MAP, POSITION_KEY, _ENC.encode(seq), ts)


def counter_record(
    name: str, positive: dict[str, int], negative: dict[str, int], ts: Timestamp
) -> OpRecord:
    return _put(COUNTERS_MAP, name, _ENC.encode(CounterSides(positive, negative)), ts)


class Restored(msgspec.Struct, frozen=True):
    fencing_token: int
    """The highest token granted before (0: none)."""
    counters: dict[str, CounterSides]
    replica_position: int = 0
    """The cluster op stream's sequence journaled through (0: none)."""


def restore(records: Iterable[OpRecord]) -> Restored:
    """The winners among reserved records (any order, duplicates allowed)."""
    store = MapStore()
    for rec in records:
        store.apply(rec)
    token = position = 0
    raw = store.get(LOCKS_MAP, FENCE_KEY)
    try:
        if raw is not None:
            token = _TOKEN.decode(raw)
        raw = store.get(CLUSTER_MAP, POSITION_KEY)
        if raw is not None:
            position = _TOKEN.decode(raw)
        counters = {}
        for row in store.rows(COUNTERS_MAP):
            value = store.get(COUNTERS_MAP, row.key)
            if value is not None:
                counters[row.key] = _SIDES.decode(value)
    except msgspec.DecodeError as exc:
        raise JournalCorrupt(f"a reserved TopGun record does not decode: {exc}") from None
    return Restored(token, counters, position)
