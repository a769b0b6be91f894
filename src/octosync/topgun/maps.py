"""The server's TopGun maps: op records folded by ``crdt.MapStore`` through the server's HLC.

Every client op becomes an :class:`OpRecord` (``wire.topgun.client_op_to_record``), so what is
applied, journaled and rebuilt at start-up is one thing. Applying is idempotent: the real
client resends every unacknowledged op with each batch, and a record already folded changes
nothing (LWW by ``(HLC, op id)``, OR adds by tag, OR removes by the tag they remove).
"""

from __future__ import annotations

from collections.abc import Iterable

from octosync.crdt.fold import MapStore, StoreSyncView
from octosync.crdt.hlc import HLC
from octosync.crdt.op import OpKind, OpRecord
from octosync.errors import CrdtValueError
from octosync.topgun.or_merkle import ORTrees

_OR = (OpKind.OR_ADD, OpKind.OR_REMOVE)
_PUT, _REMOVE = OpKind.PUT, OpKind.REMOVE


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
        if rec.op is _PUT or rec.op is _REMOVE:
            return self.store.apply_lww(rec)
        changed = self.store.apply(rec)
        if changed and rec.op in _OR:
            self.or_trees.touched(rec.map, rec.key)
        return changed

    def apply_many(self, records: list[OpRecord]) -> list[bool | CrdtValueError]:
        """:meth:`apply` with ``clock_merged`` for a batch, in order: which records changed
        state, or the error that refused one (the others still apply). A batch of LWW
        records (the usual client batch) is folded in one loop."""
        if all(rec.op is _PUT or rec.op is _REMOVE for rec in records):
            return list(self.store.apply_lww_many(records))
        out: list[bool | CrdtValueError] = []
        for rec in records:
            try:
                out.append(self.apply(rec, clock_merged=True))
            except CrdtValueError as err:
                out.append(err)
        return out

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

    def drop(self, map_name: str) -> int:
        """Forget a map (its node let it go); returns how many keys went."""
        self.or_trees.forget(map_name)
        return self.store.drop(map_name)

    def source(self, map_name: str) -> StoreSyncView:
        """One map as a Merkle sync source; values stay MsgPack bytes."""
        return StoreSyncView(self.store, map_name, raw_values=True)

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
