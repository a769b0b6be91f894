"""The server's TopGun maps: op records folded by ``crdt.MapStore`` through the server's HLC.

Every client op becomes an :class:`OpRecord` (``wire.topgun.client_op_to_record``), so what is
applied, journaled and rebuilt at start-up is one thing. Applying is idempotent: the real
client resends every unacknowledged op with each batch, and a record already folded changes
nothing (LWW by ``(HLC, op id)``, OR adds by tag, OR removes by the tag they remove).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from octosync.crdt.fold import MapStore
from octosync.crdt.hlc import HLC
from octosync.crdt.lww_map import LWWRecord
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.op import OpKind, OpRecord
from octosync.topgun.or_merkle import ORTrees

_OR = (OpKind.OR_ADD, OpKind.OR_REMOVE)


class MapSource:
    """One map of a :class:`MapStore` as a Merkle sync source (``crdt.sync.SyncSource``).

    Values stay MsgPack bytes (``msgspec.Raw``): a leaf is sent without decoding them.
    """

    def __init__(self, store: MapStore, map_name: str) -> None:
        self._store = store
        self._map = map_name

    @property
    def merkle(self) -> MerkleTree:
        return self._store.merkle(self._map)

    def leaf_records(self, path: str) -> list[tuple[str, LWWRecord]]:
        out: list[tuple[str, LWWRecord]] = []
        for key in sorted(self.merkle.leaf(path)):
            win = self._store.lww_winner(self._map, key)
            if win is None:
                continue
            value = None if win.op is OpKind.REMOVE else msgspec.Raw(win.value)
            out.append((key, LWWRecord(value, win.ts)))
        return out


class Maps:
    """Every TopGun map of the server, with the server's HLC."""

    def __init__(self, hlc: HLC) -> None:
        self.hlc = hlc
        self.store = MapStore()
        self.or_trees = ORTrees(self.store)

    def apply(self, rec: OpRecord, *, clock_merged: bool = False) -> bool:
        """Fold one record (its HLC merged into the server's, unless the caller merged the
        newest of its batch already); ``True`` when state changed."""
        if not clock_merged:
            self.hlc.update(rec.ts)
        changed = self.store.apply(rec)
        if changed and rec.op in _OR:
            self.or_trees.touched(rec.map, rec.key)
        return changed

    def load(self, records: Iterable[OpRecord]) -> int:
        """Rebuild from journaled records (start-up); returns how many changed state."""
        latest = None
        changed = 0
        for rec in records:
            changed += self.store.apply(rec)
            if latest is None or rec.ts > latest:
                latest = rec.ts
        if latest is not None:
            self.hlc.update(latest)
        return changed

    def source(self, map_name: str) -> MapSource:
        return MapSource(self.store, map_name)

    def live_items(self, map_name: str) -> dict[str, bytes]:
        """The live LWW values of a map (key -> MsgPack bytes), for queries."""
        out: dict[str, bytes] = {}
        for row in self.store.rows(map_name):
            if row.tombstone or row.value is None:
                continue
            win = self.store.lww_winner(map_name, row.key)
            if win is not None and win.op is OpKind.PUT:
                out[row.key] = win.value
        return out
