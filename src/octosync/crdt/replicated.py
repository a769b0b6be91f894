"""Replicated cells: graph cells whose value is the merge of every replica's writes.

``Replicated(ctx, state)`` makes LWW registers (the default), MV registers, PN counters, LWW
maps and lists of a ``SharedState`` into ordinary cells of ``ctx``: memos, signals and effects
read them like any cell. A merge runs in one batch and writes each affected cell with its new
observed value, so the cell's equality guard applies after the merge (a merge that lands on the
value already held invalidates nothing and memos stay suppressed), and effects run once per
merge, not once per op. Local writes go the same way and queue their op for the wire.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from octosync.crdt.seq import ListChange, diff, one_change
from octosync.crdt.shared import SharedState, check_name
from octosync.crdt.text import TextEdit
from octosync.errors import CrdtValueError
from octosync.graph.context import Context
from octosync.graph.nodes import Cell, Effect
from octosync.ipc.messages import CrdtOp

T = TypeVar("T")


class ReplicatedCell(Generic[T]):
    """One replicated value: ``get`` (a tracked read), ``value``, and the writes of its kind."""

    __slots__ = ("_owner", "cell", "kind", "name")

    def __init__(self, owner: Replicated, name: str, kind: str, cell: Cell[T]) -> None:
        self._owner = owner
        self.name = name
        self.kind = kind
        self.cell = cell

    def get(self) -> T:
        return self.cell.get()

    @property
    def value(self) -> T:
        return self.cell.peek()

    def _need(self, kind: str, method: str) -> None:
        if self.kind != kind:
            raise CrdtValueError(
                f"{method} is not an operation of {self.name!r}, a {self.kind} value",
                path="kind",
            )

    def add(self, amount: int = 1) -> None:
        """Counter: add ``amount`` (negative subtracts)."""
        self._need("pn", "add")
        self._owner._local(self._owner.state.add(self.name, amount))

    def set(self, *args: Any) -> None:
        """Register: ``set(value)``; map: ``set(field, value)``."""
        state = self._owner.state
        if self.kind == "map" and len(args) == 2:
            op = state.set_field(self.name, args[0], args[1])
        elif self.kind == "lww" and len(args) == 1:
            op = state.set(self.name, args[0])
        elif self.kind == "mv" and len(args) == 1:
            op = state.set_multi(self.name, args[0])
        else:
            raise CrdtValueError(f"set{args!r} does not fit a {self.kind} value", path="set")
        self._owner._local(op)

    def delete(self, field: str) -> None:
        """Map: delete ``field``."""
        self._need("map", "delete")
        self._owner._local(self._owner.state.delete_field(self.name, field))

    def on_change(self, callback: Callable[[T], object]) -> Effect:
        """Call ``callback(value)`` now and after every flush that changed the value."""
        return self._owner.ctx.effect(lambda: callback(self.get()))

    def _refresh(self) -> bool:
        value = self._owner.state.read(self.name, self.kind)
        if value == self.cell.peek():
            return False
        self.cell.set(value)
        return True


class ReplicatedList(ReplicatedCell[int]):
    """A list (the move-aware sequence): its value is the tuple of its values in order, and
    ``on_edit`` says what each change inserted, deleted, moved or set.

    Its graph cell holds the list's revision, not the tuple: a change costs the same whatever
    the list's length (no tuple built, compared and encoded per edit), and the tuple is made
    only when read (``get``/``value``)."""

    __slots__ = ("_edits", "_seen", "_values")

    def __init__(self, owner: Replicated, name: str, cell: Cell[int]) -> None:
        super().__init__(owner, name, "list", cell)
        owner.state.take_list_change(name)
        self._seen = self._items()
        """The ``(id, value)`` pairs as last reported: kept in step edit by edit."""
        self._values: tuple[Any, ...] | None = None
        """The values in order, made on the first read after a change."""
        self._edits: list[Callable[[ListChange], object]] = []

    def get(self) -> tuple[Any, ...]:  # type: ignore[override]
        """The values in order, as a tracked read (memos and effects re-run when it changes)."""
        self.cell.get()
        return self._tuple()

    @property
    def value(self) -> tuple[Any, ...]:  # type: ignore[override]
        return self._tuple()

    def _tuple(self) -> tuple[Any, ...]:
        if self._values is None:
            self._values = tuple(value for _, value in self._seen)
        return self._values

    def on_change(self, callback: Callable[[tuple[Any, ...]], object]) -> Effect:  # type: ignore[override]
        """Call ``callback(values)`` now and after every flush that changed the list."""
        return self._owner.ctx.effect(lambda: callback(self.get()))

    def _items(self) -> list[tuple[str, Any]]:
        return self._owner.state.list_items(self.name)

    def _ops(self, ops: tuple[CrdtOp, ...]) -> None:
        self._owner._local_many(self.name, ops)

    def insert(self, index: int, value: Any) -> None:
        """Insert ``value`` so that it is at ``index`` (0 to ``len``)."""
        self._ops(self._owner.state.list_insert(self.name, index, value))

    def push(self, value: Any) -> None:
        """Append ``value``."""
        self.insert(len(self), value)

    def move(self, source: int, target: int) -> None:
        """Move the element at ``source`` so that it is at ``target``."""
        self._ops(self._owner.state.list_move(self.name, source, target))

    def delete(self, index: int) -> None:  # type: ignore[override]
        """Remove the element at ``index``."""
        self._ops(self._owner.state.list_delete(self.name, index))

    def set(self, index: int, value: Any) -> None:
        """Replace the value at ``index``."""
        self._ops(self._owner.state.list_set(self.name, index, value))

    def __len__(self) -> int:
        return len(self._seen)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tuple())

    def __getitem__(self, index: int) -> Any:
        return self._seen[index][1]

    def on_edit(self, callback: Callable[[ListChange], object]) -> Callable[[], None]:
        """Call ``callback(change)`` after every change of the list; returns the unsubscribe."""
        self._edits.append(callback)
        return lambda: self._edits.remove(callback) if callback in self._edits else None

    def _refresh(self) -> bool:
        count, last = self._owner.state.take_list_change(self.name)
        if count == 0:
            return False
        if count == 1 and last is not None:  # one element changed: the change says what
            element, old_at, _, new_at, value = last
            change = one_change(self._seen, old_at, new_at, value)
            if old_at is not None:
                del self._seen[old_at]
            if new_at is not None:
                self._seen.insert(new_at, (element, value))
        else:
            items = self._items()
            change = diff(self._seen, items)
            self._seen = items
        if not change:
            return False
        self._values = None
        self.cell.set(self.cell.peek() + 1)
        for callback in list(self._edits):
            callback(change)
        return True


class ReplicatedPresence:
    """Every peer's presence (``pr``) or awareness (``aw``) value ``name``: ``set`` this
    replica's, read ``all`` (by peer), ``others`` (without this replica) and ``mine``. The
    server keeps them, never journaled: a presence lives while its connection does, either
    kind until its TTL runs out unless set again."""

    __slots__ = ("_owner", "cell", "kind", "name", "wanted")

    def __init__(self, owner: Replicated, name: str, kind: str) -> None:
        self._owner = owner
        self.name = name
        self.kind = kind
        self.cell: Cell[tuple[tuple[int, Any], ...]] = owner.ctx.cell(self._read())
        self.wanted: Any = None
        """What this replica last set (sent again on every reconnect and heartbeat)."""

    def set(self, value: Any) -> None:
        """Set this replica's value (``None`` clears it)."""
        self.wanted = value
        self._owner._local_many(
            self.name, (self._owner.state.set_ephemeral(self.name, self.kind, value),)
        )

    def clear(self) -> None:
        self.set(None)

    def _read(self) -> tuple[tuple[int, Any], ...]:
        # pairs, not a dict: a cell's value is JSON, whose object keys are strings
        return tuple(self._owner.state.peers(self.name, self.kind).items())

    @property
    def all(self) -> dict[int, Any]:
        """Every peer's value, by peer id."""
        return dict(self.cell.peek())

    @property
    def others(self) -> dict[int, Any]:
        me = self._owner.state.peer
        return {p: v for p, v in self.cell.peek() if p != me}

    @property
    def mine(self) -> Any:
        return self.all.get(self._owner.state.peer)

    def get(self) -> dict[int, Any]:
        """``all``, read as a tracked dependency."""
        return dict(self.cell.get())

    def on_change(self, callback: Callable[[dict[int, Any]], object]) -> Effect:
        """Call ``callback(all)`` now and after every change."""
        return self._owner.ctx.effect(lambda: callback(self.get()))

    def _refresh(self) -> bool:
        value = self._read()
        if value == self.cell.peek():
            return False
        self.cell.set(value)
        return True


class ReplicatedText(ReplicatedCell[int]):
    """A shared text: ``insert``, ``delete``, ``value`` (or ``str()``), and ``on_change``
    with index-based edits, so an editor applies others' changes without a diff.

    Its graph cell holds the text's revision, not the text: a change costs the same whatever
    the text's length, and the string is joined only when read (``get``/``value``)."""

    __slots__ = ("listeners",)

    def __init__(self, owner: Replicated, name: str, cell: Cell[int]) -> None:
        super().__init__(owner, name, "text", cell)
        self.listeners: list[Callable[[list[TextEdit]], object]] = []

    def get(self) -> str:  # type: ignore[override]
        """The text, as a tracked read (memos and effects re-run when it changes)."""
        self.cell.get()
        return str(self._owner.state.text_of(self.name))

    @property
    def value(self) -> str:  # type: ignore[override]
        return str(self._owner.state.text_of(self.name))

    def __str__(self) -> str:
        return self.value

    def __len__(self) -> int:
        return len(self._owner.state.text_of(self.name).crdt)

    def insert(self, index: int, text: str) -> None:
        """Insert ``text`` before the character at ``index`` (Unicode code points)."""
        self._owner._local_many(self.name, self._owner.state.text_insert(self.name, index, text))

    def delete(self, index: int, count: int = 1) -> None:  # type: ignore[override]
        """Delete ``count`` characters from ``index``."""
        self._owner._local_many(self.name, self._owner.state.text_delete(self.name, index, count))

    def _refresh(self) -> bool:
        edits = self._owner.state.text_of(self.name).take_edits()
        if not edits:
            return False
        self.cell.set(self.cell.peek() + 1)
        for listener in list(self.listeners):
            listener(edits)
        return True

    def on_change(  # type: ignore[override]
        self, callback: Callable[[list[TextEdit]], object]
    ) -> Callable[[], None]:
        """Call ``callback(edits)`` now (the whole text as one insert) and with the edits of
        every change after, local and received: applied in order to a copy of the text, they
        keep it equal to ``value``. Returns a function that stops the calls."""
        now = self.value
        callback([TextEdit(0, 0, now)] if now else [])
        self.listeners.append(callback)
        return lambda: self.listeners.remove(callback)


class Replicated:
    """The replicated cells of one ``Context`` over one ``SharedState``."""

    def __init__(self, ctx: Context, state: SharedState) -> None:
        self.ctx = ctx
        self.state = state
        self._cells: dict[str, ReplicatedCell[Any]] = {}
        self._ephemeral: dict[tuple[str, str], ReplicatedPresence] = {}
        self.outgoing: list[CrdtOp] = []
        """Local ops not yet taken for the wire (``take_outgoing``), unless ``on_local``."""
        self.on_local: Callable[[CrdtOp], None] | None = None
        """Called with each local op instead of queueing it in ``outgoing`` (a client)."""

    def _cell(self, name: str, kind: str) -> ReplicatedCell[Any]:
        check_name(name)
        known = self._cells.get(name)
        if known is not None:
            if known.kind != kind:
                raise CrdtValueError(f"{name!r} is a {known.kind} value, not {kind}", path="kind")
            return known
        cell = self.ctx.cell(self.state.read(name, kind))
        made: ReplicatedCell[Any] = ReplicatedCell(self, name, kind, cell)
        self._cells[name] = made
        return made

    def register(self, name: str) -> ReplicatedCell[Any]:
        """An LWW register (the default kind): the latest write wins."""
        return self._cell(name, "lww")

    def counter(self, name: str) -> ReplicatedCell[int]:
        """A PN counter: every replica's additions add up."""
        return self._cell(name, "pn")

    def multi(self, name: str) -> ReplicatedCell[tuple[Any, ...]]:
        """An MV register: concurrent writes all survive as a tuple of values."""
        return self._cell(name, "mv")

    def map(self, name: str) -> ReplicatedCell[dict[str, Any]]:
        """An LWW map: one register per field."""
        return self._cell(name, "map")

    def list(self, name: str) -> ReplicatedList:
        """A list: elements inserted, moved, set and deleted by every replica."""
        check_name(name)
        known = self._cells.get(name)
        if known is None:
            made = ReplicatedList(self, name, self.ctx.cell(0))
            self._cells[name] = made
            return made
        if not isinstance(known, ReplicatedList):
            raise CrdtValueError(f"{name!r} is a {known.kind} value, not list", path="kind")
        return known

    def presence(self, name: str = "presence") -> ReplicatedPresence:
        """Each connection's presence: alive while it is connected."""
        return self._presence(name, "pr")

    def awareness(self, name: str) -> ReplicatedPresence:
        """An awareness value (a cursor, a selection): each peer's latest, until its TTL."""
        return self._presence(name, "aw")

    def _presence(self, name: str, kind: str) -> ReplicatedPresence:
        check_name(name)
        known = self._ephemeral.get((name, kind))
        if known is None:
            known = self._ephemeral[(name, kind)] = ReplicatedPresence(self, name, kind)
        return known

    def ephemeral_values(self) -> Iterable[ReplicatedPresence]:
        return self._ephemeral.values()

    def text(self, name: str) -> ReplicatedText:
        """A shared text (a character CRDT): concurrent edits merge character by character."""
        check_name(name)
        known = self._cells.get(name)
        if known is not None:
            if not isinstance(known, ReplicatedText):
                raise CrdtValueError(f"{name!r} is a {known.kind} value, not text", path="kind")
            return known
        shared = self.state.text_of(name)
        shared.listening = True
        shared.take_edits()
        made = ReplicatedText(self, name, self.ctx.cell(0))
        self._cells[name] = made
        return made

    def merge(self, ops: Iterable[CrdtOp]) -> set[str]:
        """Merge remote ops in one batch; returns the names whose observed value changed."""
        with self.ctx.batch():
            return self._refresh(self.state.receive(ops))

    def retake(self, snapshot: set[tuple[int, str]]) -> tuple[CrdtOp, ...]:
        """The whole document came (its entry keys): drop what was collected meanwhile
        (``SharedState.retake``); returns the entries dropped."""
        with self.ctx.batch():
            dropped = self.state.retake(snapshot)
            self._refresh({(op.key or "").split("/", 1)[0] for op in dropped})
            return tuple(dropped)

    def restore_entry(self, local: CrdtOp, server: CrdtOp | None) -> None:
        """A refused local op undone (``SharedState.restore_entry``), its cells refreshed."""
        with self.ctx.batch():
            name = self.state.restore_entry(local, server)
            if name is not None:
                self._refresh((name,))

    def _refresh(self, names: Iterable[str]) -> set[str]:
        moved = set()
        for name in names:
            rc = self._cells.get(name)
            if rc is not None and rc._refresh():
                moved.add(name)
            for kind in ("pr", "aw"):
                rp = self._ephemeral.get((name, kind))
                if rp is not None and rp._refresh():
                    moved.add(name)
        return moved

    def _local(self, op: CrdtOp) -> None:
        self._local_many((op.key or "").split("/", 1)[0], (op,))

    def _local_many(self, name: str, ops: Iterable[CrdtOp]) -> None:
        for op in ops:
            if self.on_local is None:
                self.outgoing.append(op)
            else:
                self.on_local(op)
        with self.ctx.batch():
            self._refresh([name])

    def take_outgoing(self) -> builtins.list[CrdtOp]:
        ops, self.outgoing = self.outgoing, []
        return ops
