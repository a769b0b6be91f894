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
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from octosync.crdt.entries import KINDS as ENTRY_KINDS
from octosync.crdt.entries import node_of
from octosync.crdt.plane import PlaneReplica, stamp_key
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

    __slots__ = ("_by_name", "_clock", "_logical", "_wall", "peer", "replica", "texts")

    def __init__(self, peer: int, clock: Callable[[], int]) -> None:
        if not 0 < peer <= MAX_SAFE_ID:
            raise CrdtValueError(f"peer id {peer} must be in 1..2**53", path="peer")
        self.peer = peer
        self.replica = PlaneReplica()
        self._clock = clock
        self._wall = 0
        self._logical = 0
        self._by_name: dict[str, dict[str, CrdtOp]] = {}
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
        for op in ops:
            self._observe(op.stamp)
            if self.replica.apply(op):
                name = self._index(op, texts)
                if name is not None:
                    changed.add(name)
        for name, entries in texts.items():  # a batch's text entries at once, runs in order
            self.text_of(name).receive_many(entries)
        return changed

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

    def _write(self, name: str, rest: str, value: object) -> CrdtOp:
        op = CrdtOp(
            slot_id=node_of(name),
            stamp=self.stamp(),
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
        """The value of ``name`` read as ``kind`` (one of ``KINDS``)."""
        if kind == "pn":
            return self.counter(name)
        if kind == "mv":
            return self.multi(name)
        if kind == "map":
            return self.map(name)
        if kind == "text":
            text = self.texts.get(name)
            return "" if text is None else str(text)
        return self.register(name)


def document_values(ops: Iterable[CrdtOp]) -> list[tuple[str, str, Any]]:
    """Every value a document's entries hold, read by its kind: ``(name, kind, value)`` sorted
    by name and kind (a counter's sum, a register's value, an MV register's concurrent values
    as a list, a map's live fields). What the pipeline and the inspector show of a document,
    folded exactly as a replica reads it; entries of other plane users are left out."""
    state = SharedState(1, lambda: 0)
    state.receive(ops)
    out: list[tuple[str, str, Any]] = []
    for name in sorted(state._by_name):
        kinds = sorted({rest.split("/", 1)[0] for rest in state._by_name[name]})
        for kind in kinds:
            value = state.read(name, kind)
            out.append((name, kind, list(value) if kind == "mv" else value))
    out += [(name, "text", str(text)) for name, text in state.texts.items()]
    return sorted(out, key=lambda v: v[:2])
