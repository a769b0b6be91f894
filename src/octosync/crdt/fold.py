"""Fold op records into converged map state: the reference semantics the Spark pipeline mirrors.

Rules (each depends only on the SET of records, so any order and any duplicates give one state):

* LWW (``PUT`` / ``REMOVE``): per ``(map, key)`` the record with the greatest
  ``(ts, op_id)`` wins; a winning ``REMOVE`` is a tombstone (value ``None``).
* OR (``OR_ADD`` / ``OR_REMOVE``): every ``OR_ADD`` is an element tagged by its ``op_id``; an
  ``OR_REMOVE`` lists the tags it observed. Live elements are the adds whose tag no remove
  lists (add-wins: a concurrent add carries a tag no remove has seen). Row value: a MsgPack
  array of the live values ordered by tag (:func:`or_row_value`); no live element is a
  tombstone.
* Counters (``INC``): the distinct ``op_id`` amounts summed; per origin the positive and
  negative parts are kept apart (PN counter). Row value: the MsgPack integer total.

Row timestamps: the LWW winner's ``ts``; for OR and counter keys the greatest ``ts`` of any
record folded for that key.

Merkle per map (TopGun-compatible trie, :class:`~octosync.crdt.merkle.MerkleTree`): an LWW key's
entry hash is TopGun's ``fnv1a32("key:millis:counter:nodeId")`` of its winner; an OR or counter
key's entry hash is :func:`record_set_hash` of every distinct ``op_id`` folded for it. A key that
(against advice) mixes families gets the wrapping sum of its families' entry hashes. Trees are
brought up to date lazily, O(depth) per key written since the last read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from octosync.crdt.hashing import MASK32, fmix32, fnv1a32, lww_item_hash
from octosync.crdt.lww_map import LWWRecord
from octosync.crdt.merkle import DEFAULT_DEPTH, MerkleTree
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.errors import CrdtValueError

_TAGS = msgspec.msgpack.Decoder(list[str])
_INT = msgspec.msgpack.Decoder(int)
_ANY = msgspec.msgpack.Decoder()
T = TypeVar("T")


def _value(decoder: msgspec.msgpack.Decoder[T], rec: OpRecord, what: str) -> T:
    """``rec.value`` decoded, or ``CrdtValueError`` saying what this op's value must be."""
    try:
        return decoder.decode(rec.value)
    except msgspec.DecodeError as exc:
        raise CrdtValueError(f"{rec.op.name} value must be {what}: {exc}", path="value") from exc


_ENC = msgspec.msgpack.Encoder()


class SnapshotRow(msgspec.Struct, frozen=True, order=True):
    """One converged ``(map, key)``: what ``snapshot_rows`` emits and the pipeline compares."""

    map: str
    key: str
    value: bytes | None
    millis: int
    counter: int
    node: str
    tombstone: bool


def or_row_value(live: Iterable[tuple[str, bytes]]) -> bytes:
    """MsgPack array of the live OR values ordered by tag; each value is embedded as-is."""
    return _ENC.encode([msgspec.Raw(value) for _, value in sorted(live)])


def counter_row_value(total: int) -> bytes:
    return _ENC.encode(total)


def record_set_hash(key: str, op_ids: Iterable[str]) -> int:
    """Entry hash of an OR or counter key: wrapping sum of ``fmix32(fnv1a32(key:op_id))``."""
    total = 0
    for op_id in op_ids:
        total += fmix32(fnv1a32(f"{key}:{op_id}"))
    return total & MASK32


@dataclass(slots=True)
class _OrEntry:
    adds: dict[str, OpRecord] = field(default_factory=dict)
    removes: dict[str, OpRecord] = field(default_factory=dict)
    removed_tags: set[str] = field(default_factory=set)
    top: Timestamp | None = None
    set_hash: int = 0

    def live(self) -> list[tuple[str, bytes]]:
        return [(tag, r.value) for tag, r in self.adds.items() if tag not in self.removed_tags]


@dataclass(slots=True)
class _CounterEntry:
    incs: dict[str, tuple[OpRecord, int]] = field(default_factory=dict)
    top: Timestamp | None = None
    set_hash: int = 0

    def total(self) -> int:
        return sum(amount for _, amount in self.incs.values())


def _account(entry: _OrEntry | _CounterEntry, rec: OpRecord) -> None:
    """A new record for an OR or counter key: bump its newest ts and its record-set hash."""
    if entry.top is None or rec.ts > entry.top:
        entry.top = rec.ts
    entry.set_hash = (entry.set_hash + fmix32(fnv1a32(f"{rec.key}:{rec.op_id}"))) & MASK32


class MapStore:
    """In-memory fold of :class:`OpRecord` s into LWW, OR and counter state, per map."""

    def __init__(self, merkle_depth: int = DEFAULT_DEPTH) -> None:
        self._depth = merkle_depth
        self._lww: dict[tuple[str, str], OpRecord] = {}
        self._or: dict[tuple[str, str], _OrEntry] = {}
        self._ctr: dict[tuple[str, str], _CounterEntry] = {}
        self._trees: dict[str, MerkleTree] = {}
        self._dirty: dict[str, set[str]] = {}

    # -- folding --------------------------------------------------------------------------

    def apply(self, rec: OpRecord) -> bool:
        """Fold one record; ``True`` when the converged state of its key changed.

        Invalid value bytes raise :class:`CrdtValueError` before anything changes.
        """
        op = rec.op
        if op is OpKind.PUT or op is OpKind.REMOVE:
            changed = self._apply_lww(rec)
        elif op is OpKind.OR_ADD or op is OpKind.OR_REMOVE:
            changed = self._apply_or(rec)
        elif op is OpKind.INC:
            changed = self._apply_inc(rec)
        else:  # pragma: no cover - OpKind is closed
            raise CrdtValueError(f"unknown op {op!r}", path="op")
        if changed:
            dirty = self._dirty.get(rec.map)
            if dirty is None:
                dirty = self._dirty[rec.map] = set()
            dirty.add(rec.key)
        return changed

    def apply_all(self, records: Iterable[OpRecord]) -> int:
        """Fold many records; returns how many changed their key's state.

        The LWW case (the bulk of any journal) is inlined here; it is :meth:`apply` exactly.
        """
        lww, dirty = self._lww, self._dirty
        put, remove = OpKind.PUT, OpKind.REMOVE
        changed = 0
        for rec in records:
            op = rec.op
            if op is not put and op is not remove:
                changed += self.apply(rec)
                continue
            slot = (rec.map, rec.key)
            cur = lww.get(slot)
            if cur is not None:
                ts, cur_ts = rec.ts, cur.ts
                if ts < cur_ts or (ts == cur_ts and rec.op_id <= cur.op_id):
                    continue
            lww[slot] = rec
            keys = dirty.get(rec.map)
            if keys is None:
                keys = dirty[rec.map] = set()
            keys.add(rec.key)
            changed += 1
        return changed

    def apply_lww(self, rec: OpRecord) -> bool:
        """:meth:`apply` for a ``PUT`` or ``REMOVE`` (the caller knows which): the hot path of
        a server folding client batches, one call instead of three."""
        slot = (rec.map, rec.key)
        cur = self._lww.get(slot)
        if cur is not None:
            ts, cur_ts = rec.ts, cur.ts
            if ts < cur_ts or (ts == cur_ts and rec.op_id <= cur.op_id):
                return False
        self._lww[slot] = rec
        keys = self._dirty.get(rec.map)
        if keys is None:
            keys = self._dirty[rec.map] = set()
        keys.add(rec.key)
        return True

    def apply_lww_many(self, records: list[OpRecord]) -> list[bool]:
        """:meth:`apply_lww` for each of ``records`` (all ``PUT`` or ``REMOVE``), in order, in
        one loop: a server's client batch. Returns which changed state."""
        lww, dirty = self._lww, self._dirty
        flags: list[bool] = []
        for rec in records:
            slot = (rec.map, rec.key)
            cur = lww.get(slot)
            if cur is not None:
                ts, cur_ts = rec.ts, cur.ts
                if ts < cur_ts or (ts == cur_ts and rec.op_id <= cur.op_id):
                    flags.append(False)
                    continue
            lww[slot] = rec
            keys = dirty.get(rec.map)
            if keys is None:
                keys = dirty[rec.map] = set()
            keys.add(rec.key)
            flags.append(True)
        return flags

    def _apply_lww(self, rec: OpRecord) -> bool:
        slot = (rec.map, rec.key)
        cur = self._lww.get(slot)
        if cur is not None and (rec.ts, rec.op_id) <= (cur.ts, cur.op_id):
            return False
        self._lww[slot] = rec
        return True

    def _apply_or(self, rec: OpRecord) -> bool:
        tags: list[str] = []
        if rec.op is OpKind.OR_REMOVE:
            tags = _value(_TAGS, rec, "a MsgPack array of tags")
        else:
            _value(_ANY, rec, "MsgPack")
        slot = (rec.map, rec.key)
        entry = self._or.get(slot)
        if entry is None:
            entry = self._or[slot] = _OrEntry()
        if rec.op_id in entry.adds or rec.op_id in entry.removes:
            return False
        if rec.op is OpKind.OR_REMOVE:
            entry.removes[rec.op_id] = rec
            entry.removed_tags.update(tags)
        else:
            entry.adds[rec.op_id] = rec
        _account(entry, rec)
        return True

    def _apply_inc(self, rec: OpRecord) -> bool:
        amount: int = _value(_INT, rec, "a MsgPack integer")
        slot = (rec.map, rec.key)
        entry = self._ctr.get(slot)
        if entry is None:
            entry = self._ctr[slot] = _CounterEntry()
        if rec.op_id in entry.incs:
            return False
        entry.incs[rec.op_id] = (rec, amount)
        _account(entry, rec)
        return True

    # -- reading state --------------------------------------------------------------------

    def maps(self) -> list[str]:
        names = {m for m, _ in self._lww} | {m for m, _ in self._or} | {m for m, _ in self._ctr}
        return sorted(names)

    def get(self, map_name: str, key: str) -> bytes | None:
        """LWW value bytes, or ``None`` when absent or removed."""
        rec = self._lww.get((map_name, key))
        return rec.value if rec is not None and rec.op is OpKind.PUT else None

    def lww_winner(self, map_name: str, key: str) -> OpRecord | None:
        """The winning ``PUT``/``REMOVE`` record of an LWW key."""
        return self._lww.get((map_name, key))

    def or_values(self, map_name: str, key: str) -> list[tuple[str, bytes]]:
        """Live ``(tag, value bytes)`` of an OR key, ordered by tag."""
        entry = self._or.get((map_name, key))
        return sorted(entry.live()) if entry is not None else []

    def or_entry(self, map_name: str, key: str) -> tuple[list[OpRecord], set[str]]:
        """An OR key's live adds (ordered by tag) and every tag removed from it."""
        entry = self._or.get((map_name, key))
        if entry is None:
            return [], set()
        live = [r for tag, r in sorted(entry.adds.items()) if tag not in entry.removed_tags]
        return live, set(entry.removed_tags)

    def or_keys(self, map_name: str) -> list[str]:
        return sorted(k for m, k in self._or if m == map_name)

    def counter(self, map_name: str, key: str) -> int:
        entry = self._ctr.get((map_name, key))
        return entry.total() if entry is not None else 0

    def counter_state(self, map_name: str, key: str) -> tuple[dict[str, int], dict[str, int]]:
        """PN state ``(p, n)``: per origin node, the sums of increments and of decrements."""
        p: dict[str, int] = {}
        n: dict[str, int] = {}
        entry = self._ctr.get((map_name, key))
        for rec, amount in entry.incs.values() if entry is not None else ():
            side = p if amount >= 0 else n
            side[rec.origin] = side.get(rec.origin, 0) + abs(amount)
        return p, n

    def records_for(self, map_name: str, key: str) -> list[OpRecord]:
        """The records that carry the key's state (LWW: the winner only), for sync transfer."""
        slot = (map_name, key)
        out: list[OpRecord] = []
        win = self._lww.get(slot)
        if win is not None:
            out.append(win)
        entry = self._or.get(slot)
        if entry is not None:
            out.extend(entry.adds.values())
            out.extend(entry.removes.values())
        ctr = self._ctr.get(slot)
        if ctr is not None:
            out.extend(rec for rec, _ in ctr.incs.values())
        return out

    def records_of(self, map_name: str) -> list[OpRecord]:
        """Every record carrying the map's state, by key (what a node that loads the map
        folds to reach the same state: its snapshot)."""
        out: list[OpRecord] = []
        for key in sorted(self.merkle(map_name).items()):
            out.extend(self.records_for(map_name, key))
        return out

    def drop(self, map_name: str) -> int:
        """Forget a map (a node letting it go: the cluster keeps it); returns how many keys
        went. Its keys are read off its Merkle tree, so the cost is the map's size."""
        keys = list(self.merkle(map_name).items())
        for key in keys:
            slot = (map_name, key)
            self._lww.pop(slot, None)
            self._or.pop(slot, None)
            self._ctr.pop(slot, None)
        self._trees.pop(map_name, None)
        self._dirty.pop(map_name, None)
        return len(keys)

    def rows(self, map_name: str | None = None) -> Iterator[SnapshotRow]:
        """Snapshot rows ordered by ``(map, key)``; per key LWW, then OR, then counter."""
        slots = set(self._lww) | set(self._or) | set(self._ctr)
        for slot in sorted(slots):
            if map_name is not None and slot[0] != map_name:
                continue
            yield from self._rows_for(slot)

    def snapshot_rows(self) -> list[SnapshotRow]:
        return list(self.rows())

    def rows_for(self, map_name: str, key: str) -> Iterator[SnapshotRow]:
        """The snapshot rows of one key (none for a key never written)."""
        return self._rows_for((map_name, key))

    def _rows_for(self, slot: tuple[str, str]) -> Iterator[SnapshotRow]:
        m, k = slot
        win = self._lww.get(slot)
        if win is not None:
            dead = win.op is OpKind.REMOVE
            ts = win.ts
            yield SnapshotRow(
                m, k, None if dead else win.value, ts.millis, ts.counter, ts.node_id, dead
            )
        entry = self._or.get(slot)
        if entry is not None and entry.top is not None:
            live = entry.live()
            ts = entry.top
            yield SnapshotRow(
                m,
                k,
                or_row_value(live) if live else None,
                ts.millis,
                ts.counter,
                ts.node_id,
                not live,
            )
        ctr = self._ctr.get(slot)
        if ctr is not None and ctr.top is not None:
            ts = ctr.top
            yield SnapshotRow(
                m, k, counter_row_value(ctr.total()), ts.millis, ts.counter, ts.node_id, False
            )

    # -- tombstone GC and snapshot loading ------------------------------------------------

    def gc(self, horizon_ms: int) -> int:
        """Forget tombstone rows (LWW removes, OR keys with nothing live) older than
        ``horizon_ms``; returns how many keys went. Only safe once every replica has passed the
        horizon: a record older than it that arrives later is folded as if new."""
        gone: list[tuple[str, str]] = []
        for slot, win in list(self._lww.items()):
            if win.op is OpKind.REMOVE and win.ts.millis < horizon_ms:
                del self._lww[slot]
                gone.append(slot)
        for slot, entry in list(self._or.items()):
            if entry.top is not None and entry.top.millis < horizon_ms and not entry.live():
                del self._or[slot]
                gone.append(slot)
        for m, k in gone:
            self._dirty.setdefault(m, set()).add(k)
        return len(gone)

    def load_lww_rows(self, rows: Iterable[SnapshotRow]) -> None:
        """Seed LWW state from compacted snapshot rows, to continue from the journal's tail.

        Rows carry no op id (loaded winners get ``""``, the lowest, for tie-breaks), no OR tags
        and no per-record history, so only LWW maps can be loaded this way, and the result is
        exact when no tail record repeats a loaded winner's timestamp (an HLC never does).
        """
        for row in rows:
            ts = Timestamp(row.millis, row.counter, row.node)
            if row.tombstone:
                rec = OpRecord(row.map, row.key, OpKind.REMOVE, b"", ts, row.node, "")
            elif row.value is None:
                raise CrdtValueError("a live row without a value", path=f"{row.map}/{row.key}")
            else:
                rec = OpRecord(row.map, row.key, OpKind.PUT, row.value, ts, row.node, "")
            self._apply_lww(rec)
            self._dirty.setdefault(row.map, set()).add(row.key)

    # -- Merkle ---------------------------------------------------------------------------

    def entry_hash(self, map_name: str, key: str) -> int | None:
        """The key's Merkle entry hash, or ``None`` when no record was folded for it."""
        slot = (map_name, key)
        parts: list[int] = []
        win = self._lww.get(slot)
        if win is not None:
            parts.append(lww_item_hash(key, win.ts.millis, win.ts.counter, win.ts.node_id))
        entry = self._or.get(slot)
        if entry is not None and entry.top is not None:
            parts.append(entry.set_hash)
        ctr = self._ctr.get(slot)
        if ctr is not None and ctr.top is not None:
            parts.append(ctr.set_hash)
        return sum(parts) & MASK32 if parts else None

    def merkle(self, map_name: str) -> MerkleTree:
        """The map's Merkle tree, brought up to date (treat it as read-only)."""
        tree = self._trees.get(map_name)
        if tree is None:
            tree = self._trees[map_name] = MerkleTree(self._depth)
        dirty = self._dirty.pop(map_name, None)
        lww, orm, ctr = self._lww, self._or, self._ctr
        plain: list[tuple[str, Timestamp]] = []
        mixed: list[tuple[str, int]] = []  # OR / counter entries, or several kinds on one key
        for key in dirty or ():
            slot = (map_name, key)
            win = lww.get(slot)
            if win is not None and slot not in orm and slot not in ctr:
                plain.append((key, win.ts))  # the common case, hashed in one batch below
                continue
            h = self.entry_hash(map_name, key)
            if h is None:
                tree.remove(key)
            else:
                mixed.append((key, h))
        tree.update_many(plain)
        tree.set_items(mixed)
        return tree

    def merkle_root(self, map_name: str) -> int:
        return self.merkle(map_name).root()

    def merkle_buckets(self, map_name: str, path: str = "") -> dict[str, int]:
        return self.merkle(map_name).buckets(path)


def fold(records: Iterable[OpRecord], merkle_depth: int = DEFAULT_DEPTH) -> MapStore:
    """A fresh :class:`MapStore` with ``records`` folded in."""
    store = MapStore(merkle_depth)
    store.apply_all(records)
    return store


class StoreSyncView:
    """One LWW map of a :class:`MapStore` as a sync source and target (TopGun Merkle walk).

    Leaf records carry each key's LWW winner (value decoded from its MsgPack bytes, ``None``
    for a tombstone); a record received is folded back as a ``PUT``/``REMOVE`` op record whose
    origin is the timestamp's node and whose op id is the timestamp's string form.
    ``raw_values`` keeps values as their MsgPack bytes (``msgspec.Raw``): a server relaying
    leaves never decodes them.
    """

    def __init__(self, store: MapStore, map_name: str, *, raw_values: bool = False) -> None:
        self.store = store
        self.map_name = map_name
        self.raw_values = raw_values

    @property
    def merkle(self) -> MerkleTree:
        return self.store.merkle(self.map_name)

    def leaf_records(self, path: str) -> list[tuple[str, LWWRecord]]:
        out: list[tuple[str, LWWRecord]] = []
        for key in sorted(self.merkle.leaf(path)):
            win = self.store.lww_winner(self.map_name, key)
            if win is not None:
                if win.op is OpKind.REMOVE:
                    value = None
                elif self.raw_values:
                    value = msgspec.Raw(win.value)
                else:
                    value = _ANY.decode(win.value)
                out.append((key, LWWRecord(value, win.ts)))
        return out

    def merge(self, key: str, rec: LWWRecord) -> bool:
        ts = rec.timestamp
        if rec.value is None:
            op = OpRecord(self.map_name, key, OpKind.REMOVE, b"", ts, ts.node_id, str(ts))
        else:
            value = _ENC.encode(rec.value)
            op = OpRecord(self.map_name, key, OpKind.PUT, value, ts, ts.node_id, str(ts))
        return self.store.apply(op)
