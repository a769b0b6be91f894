"""A shared document on the CRDT cell plane: counters, registers and maps by name.

Every value is a set of plane entries, each a last-writer-wins entry under the plane's stamp
order, so any lazily plane replica (lazily-py's ``CrdtPlaneRuntime`` included) converges on the
same entries without knowing what they mean. The kinds differ only in which entries a write
touches and how a read folds them:

=============  ==========================  =====================================================
kind           entry keys                  state (JSON) and read
=============  ==========================  =====================================================
LWW register   ``NAME/lww``                ``value``; the latest write wins (the default kind)
PN counter     ``NAME/pn/PEER``            ``[p, n]``: each peer's own tallies; the value is the
                                           sum of ``p - n``. A peer only ever writes its own
                                           entry, with ever-greater stamps and tallies, so the
                                           entry's LWW winner is the per-peer maximum: no
                                           increment is lost, none counted twice.
MV register    ``NAME/mv/PEER``            ``[value, {peer: n}]``: each peer's latest write and
                                           the version vector it had seen; the values are those
                                           no other entry's vector dominates (concurrent writes
                                           all survive until one write has seen them).
LWW map        ``NAME/map/FIELD``          ``[value]`` or ``[]`` (deleted); one LWW per field.
list           ``NAME/lp/ID``,             the move-aware sequence (``crdt/seq.py``): per element
               ``NAME/lv/ID``,             a position ``[digits...]`` (its writer's peer breaks
               ``NAME/ld/ID``              ties), a value, and ``true`` once removed: three LWW
                                           registers; ``ID`` is ``PEER.WALL.LOGICAL``, minted
                                           by the inserting replica from its insert's stamp.
text           ``NAME/tx/PEER/CHUNK``,     each writer's inserted runs and deleted id ranges in
               ``NAME/td/PEER/N``          grow-only chunks (``crdt/text_entries.py``); the
                                           value is the character CRDT's text.
=============  ==========================  =====================================================

The node id of every entry of ``NAME`` is ``node_of(NAME)`` (48 bits of FNV-1a-64), so
replicas agree on it with no coordination. Names and fields are single key segments.

Stamps come from a hybrid logical clock over the injected wall clock (milliseconds): each local
stamp is above every stamp issued or received before. Sans-I/O: writes return the op to send.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from octosync.crdt import collect
from octosync.crdt.entries import EPHEMERAL_KINDS, is_gc, node_of
from octosync.crdt.entries import KINDS as ENTRY_KINDS
from octosync.crdt.plane import PlaneReplica, stamp_key
from octosync.crdt.seq import Element, Position, check_position, mint_id, place
from octosync.crdt.text_collect import is_rewrite
from octosync.crdt.text_entries import SharedText
from octosync.errors import CrdtValueError
from octosync.ipc.messages import MAX_SAFE_ID, CrdtOp, WireStamp

NAME_PATTERN = re.compile(r"^[^/]{1,256}$")
KINDS = tuple(ENTRY_KINDS)
TEXT_TAGS = ("tx", "td")
_JSON = msgspec.json.Encoder(order="deterministic")


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CrdtValueError(f"{what} {name!r} must be 1 to 256 characters without '/'", path=what)
    return name


def _decode(data: bytes) -> Any:
    return msgspec.json.decode(data)


class SharedState:
    """One replica's view of a shared document (sans-I/O; the clock is injected)."""

    __slots__ = (
        "_by_name",
        "_clock",
        "_lists",
        "_logical",
        "_wall",
        "ephemeral",
        "peer",
        "replica",
        "texts",
    )

    def __init__(self, peer: int, clock: Callable[[], int]) -> None:
        if not 0 < peer <= MAX_SAFE_ID:
            raise CrdtValueError(f"peer id {peer} must be in 1..2**53", path="peer")
        self.peer = peer
        self.replica = PlaneReplica()
        self._clock = clock
        self._wall = 0
        self._logical = 0
        self._by_name: dict[str, dict[str, CrdtOp]] = {}
        self._lists: dict[str, _ListRegisters] = {}
        self.ephemeral: dict[str, dict[str, CrdtOp]] = {}
        """Presence and awareness entries by name and ``KIND/PEER``: the latest of each, kept
        apart from the replica (they are not the document's state)."""
        self.texts: dict[str, SharedText] = {}
        """Each text value's character CRDT, fed as its entries arrive."""

    # --- the clock ----------------------------------------------------------------------------

    def stamp(self) -> WireStamp:
        """A fresh stamp above every stamp issued or received so far."""
        wall = self._clock()
        if wall > self._wall:
            self._wall, self._logical = wall, 0
        else:
            self._logical += 1
        return WireStamp(wall_time=self._wall, logical=self._logical, peer=self.peer)

    def _observe(self, stamp: WireStamp) -> None:
        if (stamp.wall_time, stamp.logical) > (self._wall, self._logical):
            self._wall, self._logical = stamp.wall_time, stamp.logical

    # --- merging ------------------------------------------------------------------------------

    def receive(self, ops: Iterable[CrdtOp]) -> set[str]:
        """Merge remote ops; returns the names whose entries changed."""
        changed: set[str] = set()
        texts: dict[str, list[tuple[str, bytes]]] = {}
        watermarks: list[CrdtOp] = []
        rewrites: dict[str, set[str]] = {}
        for op in ops:
            self._observe(op.stamp)
            if _is_ephemeral(op):
                taken = self._ephemeral(op)
                if taken is not None:
                    changed.add(taken)
                continue
            if self.replica.apply(op):
                if is_rewrite(op) and op.key:  # a compacted text chunk (or a list's gc entry)
                    text, _, rest = op.key.partition("/")
                    rewrites.setdefault(text, set()).add(rest)
                if is_gc(op):
                    watermarks.append(op)
                    continue
                name = self._index(op, texts)
                if name is not None:
                    changed.add(name)
        for gc in watermarks:  # after the batch: a whole document comes in key order, gc first
            gone = self._forget(collect.purge(self.replica, gc))
            if gone:
                changed.add(gone)
        for name, entries in texts.items():  # a batch's text entries at once, runs in order
            rewritten = {rest for rest, _ in entries if rest in rewrites.get(name, ())}
            self.text_of(name).receive_many(entries, rewritten)
        return changed

    def _forget(self, dropped: Iterable[CrdtOp]) -> str:
        """Collected list entries (already out of the replica) out of the lists; the name of
        the list they were of ("" for none)."""
        name = ""
        for op in dropped:
            name, rest = (op.key or "").split("/", 1)
            self._by_name.get(name, {}).pop(rest, None)
            held = self._lists.get(name)
            if held is not None:
                held.forget(rest[3:])
        return name

    def retake(self, snapshot: set[tuple[int, str]]) -> list[CrdtOp]:
        """After joining: the document's whole state came (``snapshot``, its entry keys). A
        list element held here, absent from it, whose mint stamp a ``NAME/gc`` watermark
        covers was collected while this replica was away: it goes here too, so this copy
        matches the server's. Returns the entries dropped."""
        dropped: list[CrdtOp] = []
        for name, held in self._lists.items():
            gc = self.replica.get(node_of(name), f"{name}/{collect.GC_TAG}")
            if gc is None:
                continue
            try:
                mark = collect.decode(gc.state)
            except CrdtValueError:
                continue
            node = node_of(name)
            for element in held.ids():
                minted = collect.mint_stamp(element)
                keys = [(node, f"{name}/{tag}/{element}") for tag in collect.ELEMENT_TAGS]
                if minted is None or not collect.covers(mark, minted):
                    continue
                if not any(k in snapshot for k in keys):
                    dropped += [
                        op for _, k in keys if (op := self.replica.drop(node, k)) is not None
                    ]
        self._forget(dropped)
        return dropped

    def restore_entry(self, local: CrdtOp, server: CrdtOp | None) -> str | None:
        """Undo a local op the server refused: its entry becomes the server's (``server``,
        None when it holds none). Returns the value's name (None: nothing this replica reads
        changed; a text's refused chunk stays, since a text cannot take back a placed run)."""
        key = local.key or ""
        if "/" not in key:
            return None
        name, rest = key.split("/", 1)
        tag = rest.split("/", 1)[0]
        if tag in TEXT_TAGS:
            return None
        self.replica.drop(local.slot_id, key)
        if server is not None:
            self.replica.apply(server)
            return self._index(server)
        self._by_name.get(name, {}).pop(rest, None)
        held = self._lists.get(name)
        if held is not None and rest[:3] in _LIST_TAGS:
            held.drop_register(rest[:2], rest[3:])
        return name

    def _ephemeral(self, op: CrdtOp) -> str | None:
        """Take a presence or awareness op; its name when it is newer, else None."""
        parts = (op.key or "").split("/")
        held = self.ephemeral.setdefault(parts[0], {})
        rest = f"{parts[1]}/{parts[2]}"
        old = held.get(rest)
        if old is not None and stamp_key(op.stamp) <= stamp_key(old.stamp):
            return None
        held[rest] = op
        return parts[0]

    def set_ephemeral(self, name: str, kind: str, value: object) -> CrdtOp:
        """Set this peer's presence (``pr``) or awareness (``aw``) value ``name``; ``None``
        clears it."""
        check_name(name)
        self._check_value(value)
        op = CrdtOp(
            slot_id=node_of(name),
            stamp=self.stamp(),
            state=_JSON.encode(value),
            key=f"{name}/{kind}/{self.peer}",
        )
        self._ephemeral(op)
        return op

    def peers(self, name: str, kind: str) -> dict[int, Any]:
        """Each peer's live presence or awareness value ``name`` (as the server last said)."""
        out: dict[int, Any] = {}
        for rest, op in sorted(self.ephemeral.get(name, {}).items()):
            tag, _, peer = rest.partition("/")
            if tag != kind or not peer.isdigit():
                continue
            try:
                value = _decode(op.state)  # type: ignore[arg-type]
            except msgspec.DecodeError:
                continue
            if value is not None:
                out[int(peer)] = value
        return dict(sorted(out.items()))

    def _index(
        self, op: CrdtOp, texts: dict[str, list[tuple[str, bytes]]] | None = None
    ) -> str | None:
        key = op.key
        if key is None or "/" not in key:
            return None  # not one of this document's entries (another plane user's node)
        name, rest = key.split("/", 1)
        tag = rest.split("/", 1)[0]
        if tag not in KINDS or op.slot_id != node_of(name):
            return None
        if tag in TEXT_TAGS:
            if isinstance(op.state, bytes) and texts is not None:
                texts.setdefault(name, []).append((rest, op.state))
            return name
        self._by_name.setdefault(name, {})[rest] = op
        if rest[:3] in _LIST_TAGS:
            self._lists.setdefault(name, _ListRegisters()).take(rest[:2], rest[3:], op)
        return name

    def text_of(self, name: str) -> SharedText:
        """The text value ``name`` (empty until written)."""
        text = self.texts.get(name)
        if text is None:
            text = self.texts[name] = SharedText(self.peer)
            text.listening = False
        return text

    def _write_text(self, name: str, writes: list[tuple[str, bytes]]) -> list[CrdtOp]:
        ops = []
        for rest, state in writes:
            op = CrdtOp(
                slot_id=node_of(name), stamp=self.stamp(), state=state, key=f"{name}/{rest}"
            )
            self.replica.apply(op)  # the text already holds what it wrote
            ops.append(op)
        return ops

    def text_insert(self, name: str, index: int, text: str) -> list[CrdtOp]:
        """Insert ``text`` at ``index`` of a text value; the chunk entries to send."""
        check_name(name)
        return self._write_text(name, self.text_of(name).insert(index, text))

    def text_delete(self, name: str, index: int, count: int = 1) -> list[CrdtOp]:
        """Delete ``count`` characters at ``index`` of a text value."""
        check_name(name)
        return self._write_text(name, self.text_of(name).delete(index, count))

    def _write(self, name: str, rest: str, value: object, stamp: WireStamp | None = None) -> CrdtOp:
        op = CrdtOp(
            slot_id=node_of(name),
            stamp=stamp or self.stamp(),
            state=_JSON.encode(value),
            key=f"{name}/{rest}",
        )
        self.replica.apply(op)
        self._index(op)
        return op

    # --- writes -------------------------------------------------------------------------------

    def set(self, name: str, value: object) -> CrdtOp:
        """Write an LWW register."""
        check_name(name)
        self._check_value(value)
        return self._write(name, "lww", value)

    def add(self, name: str, amount: int = 1) -> CrdtOp:
        """Add ``amount`` (negative: subtract) to a PN counter."""
        check_name(name)
        if type(amount) is not int:
            raise CrdtValueError(f"a counter adds integers, not {amount!r}", path="amount")
        p, n = self._tally(name, self.peer)
        if amount >= 0:
            p += amount
        else:
            n -= amount
        return self._write(name, f"pn/{self.peer}", [p, n])

    def set_multi(self, name: str, value: object) -> CrdtOp:
        """Write an MV register: this write supersedes every value this replica has seen."""
        check_name(name)
        self._check_value(value)
        seen: dict[str, int] = {}
        for _, op in self._entries(name, "mv/"):
            decoded = self._mv(op)
            if decoded is None:
                continue
            for peer, count in decoded[1].items():
                seen[peer] = max(seen.get(peer, 0), count)
        me = str(self.peer)
        seen[me] = seen.get(me, 0) + 1
        return self._write(name, f"mv/{self.peer}", [value, seen])

    def set_field(self, name: str, field: str, value: object) -> CrdtOp:
        """Write one field of an LWW map."""
        check_name(name)
        check_name(field, "field")
        self._check_value(value)
        return self._write(name, f"map/{field}", [value])

    def delete_field(self, name: str, field: str) -> CrdtOp:
        """Delete one field of an LWW map (a later write brings it back)."""
        check_name(name)
        check_name(field, "field")
        return self._write(name, f"map/{field}", [])

    # --- lists (the move-aware sequence of crdt/seq.py) -----------------------------------------

    def list_insert(self, name: str, index: int, value: object) -> tuple[CrdtOp, ...]:
        """Insert ``value`` so that it is at ``index`` (0 to the length): a new element, its id
        minted from the stamp of its value entry, between its two neighbours. The position
        entry takes the next stamp: a lazily plane replica takes one op per ``(node, stamp)``,
        and every entry of a list shares its node."""
        check_name(name)
        self._check_value(value)
        live = self._elements(name)
        _check_index(index, len(live) + 1)
        position = _between(
            live[index - 1] if index else None,
            live[index] if index < len(live) else None,
            self.peer,
        )
        stamp = self.stamp()
        element = mint_id(stamp)
        return (
            self._write(name, f"lv/{element}", value, stamp),
            self._write(name, f"lp/{element}", list(position)),  # its own stamp: see the doc
        )

    def list_move(self, name: str, source: int, target: int) -> tuple[CrdtOp, ...]:
        """Move the element at ``source`` so that it is at ``target``: one new position for
        it (nothing when it is already there)."""
        check_name(name)
        live = self._elements(name)
        _check_index(source, len(live), "from")
        _check_index(target, len(live), "to")
        if source == target:
            return ()
        moving = live[source]
        lo: Element | None
        hi: Element | None
        if target > source:  # its neighbours once it is out of the list, no copy made
            lo, hi = live[target], live[target + 1] if target + 1 < len(live) else None
        else:
            lo, hi = live[target - 1] if target else None, live[target]
        position = _between(lo, hi, self.peer)
        return (self._write(name, f"lp/{moving.id}", list(position)),)

    def list_delete(self, name: str, index: int) -> tuple[CrdtOp, ...]:
        """Remove the element at ``index`` (its removed register: a tombstone that a concurrent
        edit or move does not undo)."""
        check_name(name)
        live = self._elements(name)
        _check_index(index, len(live))
        return (self._write(name, f"ld/{live[index].id}", True),)

    def list_set(self, name: str, index: int, value: object) -> tuple[CrdtOp, ...]:
        """Replace the value at ``index`` (its position is untouched: a concurrent move
        applies too)."""
        check_name(name)
        self._check_value(value)
        live = self._elements(name)
        _check_index(index, len(live))
        return (self._write(name, f"lv/{live[index].id}", value),)

    def list_elements(self, name: str) -> list[Element]:
        """The list's live elements in order (a copy: the caller may change it)."""
        return list(self._elements(name))

    def _elements(self, name: str) -> list[Element]:
        """The list's live elements in order, not copied (read them, never change them)."""
        held = self._lists.get(name)
        return [] if held is None else held.elements()

    def list_values(self, name: str) -> tuple[Any, ...]:
        held = self._lists.get(name)
        return () if held is None else tuple(held.values_in_order())

    def take_list_change(self, name: str) -> tuple[int, OneChange | None]:
        """How many of list ``name``'s elements changed since the last call, and the latest
        change (a reader that saw the list before it needs nothing else when there was one)."""
        held = self._lists.get(name)
        return (0, None) if held is None else held.take_change()

    def list_items(self, name: str) -> list[tuple[str, Any]]:
        """The list's ``(id, value)`` pairs in order (a copy)."""
        held = self._lists.get(name)
        return [] if held is None else list(held.items())

    @staticmethod
    def _check_value(value: object) -> None:
        try:
            _JSON.encode(value)
        except (TypeError, msgspec.EncodeError) as exc:
            raise CrdtValueError(f"a shared value must be JSON: {exc}", path="value") from exc

    # --- reads --------------------------------------------------------------------------------

    def _entries(self, name: str, prefix: str) -> list[tuple[str, CrdtOp]]:
        entries = self._by_name.get(name, {})
        return sorted((rest, op) for rest, op in entries.items() if rest.startswith(prefix))

    def _tally(self, name: str, peer: int) -> tuple[int, int]:
        op = self._by_name.get(name, {}).get(f"pn/{peer}")
        return (0, 0) if op is None else self._pn(op) or (0, 0)

    @staticmethod
    def _pn(op: CrdtOp) -> tuple[int, int] | None:
        try:
            p, n = _decode(op.state)  # type: ignore[arg-type]
        except (msgspec.DecodeError, TypeError, ValueError):
            return None
        if type(p) is not int or type(n) is not int or p < 0 or n < 0:
            return None
        return p, n

    @staticmethod
    def _mv(op: CrdtOp) -> tuple[Any, dict[str, int]] | None:
        try:
            value, vv = _decode(op.state)  # type: ignore[arg-type]
        except (msgspec.DecodeError, TypeError, ValueError):
            return None
        if not isinstance(vv, dict) or not all(type(c) is int for c in vv.values()):
            return None
        return value, vv

    def counter(self, name: str) -> int:
        total = 0
        for _, op in self._entries(name, "pn/"):
            tally = self._pn(op)
            if tally is not None:
                total += tally[0] - tally[1]
        return total

    def register(self, name: str, default: object = None) -> Any:
        op = self._by_name.get(name, {}).get("lww")
        if op is None:
            return default
        try:
            return _decode(op.state)  # type: ignore[arg-type]
        except msgspec.DecodeError:
            return default

    def multi(self, name: str) -> tuple[Any, ...]:
        """The MV register's concurrent values, ordered by the stamps that wrote them."""
        entries = [(op, d) for _, op in self._entries(name, "mv/") if (d := self._mv(op))]

        def dominated(vv: dict[str, int]) -> bool:
            return any(
                other != vv and all(other.get(p, 0) >= c for p, c in vv.items())
                for _, (_, other) in entries
            )

        kept = [(op, value) for op, (value, vv) in entries if not dominated(vv)]
        kept.sort(key=lambda e: stamp_key(e[0].stamp))
        return tuple(value for _, value in kept)

    def map(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rest, op in self._entries(name, "map/"):
            try:
                held = _decode(op.state)  # type: ignore[arg-type]
            except msgspec.DecodeError:
                continue
            if isinstance(held, list) and len(held) == 1:
                out[rest[len("map/") :]] = held[0]
        return out

    def read(self, name: str, kind: str) -> Any:
        """The value of ``name`` read as ``kind`` (one of ``KINDS``, or ``list``)."""
        if kind == "pn":
            return self.counter(name)
        if kind == "mv":
            return self.multi(name)
        if kind == "map":
            return self.map(name)
        if kind == "list":
            return self.list_values(name)
        if kind == "text":
            text = self.texts.get(name)
            return "" if text is None else str(text)
        return self.register(name)


OneChange = tuple[str, int | None, Any, int | None, Any]
"""One element's change: ``(id, old index, old value, new index, new value)`` (None: absent)."""

_LIST_TAGS = frozenset({"lp/", "lv/", "ld/"})


class _ListRegisters:
    """One list's registers, decoded as their entries change, and its live elements kept in
    order as they do (a change moves one element: a binary search, no sort)."""

    __slots__ = (
        "_items",
        "_keys",
        "_live",
        "_ordered",
        "_values",
        "changed",
        "last",
        "positions",
        "removed",
        "values",
    )

    def __init__(self) -> None:
        self.positions: dict[str, tuple[Position, int]] = {}
        self.values: dict[str, Any] = {}
        self.removed: set[str] = set()
        self._ordered: list[Element] = []
        self._items: list[tuple[str, Any]] = []
        self._values: list[Any] = []
        self._keys: list[tuple[Position, int, str]] = []
        self._live: dict[str, tuple[Position, int, str]] = {}
        self.changed = 0
        """Elements placed, removed or given a value since the last ``take_change``."""
        self.last: OneChange | None = None
        """The latest of those: ``(id, old index, old value, new index, new value)``."""

    def take_change(self) -> tuple[int, OneChange | None]:
        """How many element changes there were since the last call, and the latest."""
        out = (self.changed, self.last)
        self.changed, self.last = 0, None
        return out

    def take(self, tag: str, element: str, op: CrdtOp) -> None:
        """The winning entry of one register changed (an unreadable one reads as absent)."""
        state = op.state if isinstance(op.state, bytes) else b""
        if tag == "ld":
            if state == b"true":
                self.removed.add(element)
            else:
                self.removed.discard(element)
        else:
            try:
                decoded = _decode(state)
                if tag == "lp":
                    self.positions[element] = (check_position(decoded, "state"), op.stamp.peer)
                else:
                    self.values[element] = decoded
            except (msgspec.DecodeError, CrdtValueError):
                (self.positions if tag == "lp" else self.values).pop(element, None)
        self._place(element)

    def _place(self, element: str) -> None:
        old = self._live.pop(element, None)
        old_at: int | None = None
        old_value: Any = None
        if old is not None:
            old_at = at = bisect_left(self._keys, old)
            old_value = self._values[at]
            del self._keys[at], self._ordered[at], self._items[at], self._values[at]
        placed = self.positions.get(element)
        if placed is None or element not in self.values or element in self.removed:
            if old_at is not None:
                self.changed += 1
                self.last = (element, old_at, old_value, None, None)
            return
        key = (placed[0], placed[1], element)
        at = bisect_left(self._keys, key)
        self._keys.insert(at, key)
        value = self.values[element]
        self._ordered.insert(at, Element(element, placed[0], placed[1], value))
        self._items.insert(at, (element, value))
        self._values.insert(at, value)
        self._live[element] = key
        self.changed += 1
        self.last = (element, old_at, old_value, at, value)

    def elements(self) -> list[Element]:
        return self._ordered

    def ids(self) -> list[str]:
        """Every element held, live or removed."""
        return list(set(self.positions) | set(self.values) | self.removed)

    def drop_register(self, tag: str, element: str) -> None:
        """One register of an element back to absent (a refused local write undone)."""
        if tag == "lp":
            self.positions.pop(element, None)
        elif tag == "lv":
            self.values.pop(element, None)
        else:
            self.removed.discard(element)
        self._place(element)

    def forget(self, element: str) -> None:
        """A collected element: out of every register (out of the order, if it was in)."""
        self.positions.pop(element, None)
        self.values.pop(element, None)
        self.removed.discard(element)
        self._place(element)

    def items(self) -> list[tuple[str, Any]]:
        return self._items

    def values_in_order(self) -> list[Any]:
        return self._values


def _is_ephemeral(op: CrdtOp) -> bool:
    parts = (op.key or "").split("/")
    return len(parts) == 3 and parts[1] in EPHEMERAL_KINDS and op.slot_id == node_of(parts[0])


def _check_index(index: int, size: int, what: str = "index") -> None:
    if type(index) is not int or not 0 <= index < size:
        raise CrdtValueError(f"{what} {index!r} is outside the list (0 to {size - 1})", path=what)


def _between(lo: Element | None, hi: Element | None, peer: int) -> Position:
    """A position between two neighbours, ending with ``peer``'s digits. Neighbours with one
    position (only a writer outside this layout makes them) leave no room between: the new
    element goes after both."""
    low = None if lo is None else lo.position
    high = None if hi is None else hi.position
    if low is not None and high is not None and low >= high:
        high = None
    return place(low, high, peer)


_LIST_KIND_TAGS = frozenset({"lp", "lv", "ld"})


def document_values(ops: Iterable[CrdtOp]) -> list[tuple[str, str, Any]]:
    """Every value a document's entries hold, read by its kind: ``(name, kind, value)`` sorted
    by name and kind (a counter's sum, a register's value, an MV register's concurrent values
    as a list, a map's live fields, a list's values in order). What the pipeline and the
    inspector show of a document,
    folded exactly as a replica reads it; entries of other plane users are left out."""
    state = SharedState(1, lambda: 0)
    state.receive(ops)
    out: list[tuple[str, str, Any]] = []
    for name in sorted(state._by_name):
        tags = {rest.split("/", 1)[0] for rest in state._by_name[name]}
        kinds = sorted({"list" if tag in _LIST_KIND_TAGS else tag for tag in tags})
        for kind in kinds:
            value = state.read(name, kind)
            out.append((name, kind, list(value) if kind in ("mv", "list") else value))
    out += [(name, "text", str(text)) for name, text in state.texts.items()]
    return sorted(out, key=lambda v: v[:2])
