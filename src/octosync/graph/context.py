"""The Context: node table, batching, marking, and the entry points publishers use.

A flush (``graph/flush.py``) runs when the outermost batch exits; a write outside a batch is
its own batch. The context epoch counts flushes whose change set was not empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import suppress
from types import TracebackType
from typing import Any, TypeVar

from octosync.bounds import MAX_SAFE_INTEGER as MAX_SAFE_ID
from octosync.bounds import NODE_KEY_MAX, NODE_KEY_PATTERN
from octosync.errors import GraphError
from octosync.graph.changes import ChangeSet
from octosync.graph.flush import run_flush
from octosync.graph.nodes import (
    ADDED,
    CHECK,
    CLEAN,
    DIRTY,
    Cell,
    Effect,
    Memo,
    Node,
    Signal,
)
from octosync.graph.type_tags import TypeRegistry, default_registry

T = TypeVar("T")
D = TypeVar("D", bound="Memo[Any] | Signal[Any]")
Listener = Callable[[ChangeSet], None]
Resolver = Callable[[Node], bool]


def _everything(_: Node) -> bool:
    return True


class _Batch:
    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def __enter__(self) -> None:
        self._ctx._depth += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._ctx._exit()


class Context:
    """One reactive graph. Not thread-safe: drive it from one thread or event loop."""

    def __init__(self, registry: TypeRegistry | None = None) -> None:
        self.registry = registry or default_registry
        self.epoch = 0
        self._nodes: list[Node | None] = []
        self._names: dict[str, Node] = {}
        self._free: list[int] = []
        self._depth = 0
        self._computing = 0
        self._tracking: dict[Node, None] | None = None
        self._gen = 0
        self._touched: list[Node] = []
        self._eager: list[Node] = []
        self._listeners: list[Listener] = []
        self._resolvers: list[Resolver] = []
        self._resolve_all = False
        self._batch = _Batch(self)

    # --- creating nodes ----------------------------------------------------------------------

    def cell(self, value: T, type_tag: str = "json", *, name: str | None = None) -> Cell[T]:
        node: Cell[T] = Cell()
        self._check_name(name)
        node._init(self, self._next_id(), type_tag)
        node._name = name
        assert node._encode is not None
        node._payload = node._encode(value)
        node._value = value
        node._state = CLEAN
        self._add(node)
        return node

    def memo(
        self, fn: Callable[[], T], type_tag: str = "json", *, name: str | None = None
    ) -> Memo[T]:
        return self._derived(Memo(), fn, type_tag, name)

    def signal(
        self, fn: Callable[[], T], type_tag: str = "json", *, name: str | None = None
    ) -> Signal[T]:
        return self._derived(Signal(), fn, type_tag, name)

    def _derived(self, node: D, fn: Callable[[], T], type_tag: str, name: str | None) -> D:
        """A memo or signal: named, numbered and added like every node."""
        self._check_name(name)
        node._init(self, self._next_id(), type_tag)
        node._name = name
        node._fn = fn
        self._add(node)
        return node

    def effect(self, fn: Callable[[], object]) -> Effect:
        node = Effect()
        node._init(self, self._next_id(), None)
        node._fn = fn
        self._add(node)
        return node

    def batch(self) -> _Batch:
        """Group writes; nested batches flush once, when the outermost one exits."""
        return self._batch

    # --- reading the graph -------------------------------------------------------------------

    def node(self, node_id: int) -> Node:
        """The live node with this id; GraphError if there is none."""
        if 0 <= node_id < len(self._nodes):
            node = self._nodes[node_id]
            if node is not None:
                return node
        raise GraphError(f"no live node {node_id}", path=f"node/{node_id}")

    def nodes(self) -> Iterator[Node]:
        """Live nodes in id order."""
        return (n for n in self._nodes if n is not None)

    @property
    def in_batch(self) -> bool:
        return self._depth > 0

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with each non-empty change set; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def add_resolver(self, wants: Resolver | None = None) -> Callable[[], None]:
        """Resolve, at every flush, the dirty derived nodes ``wants`` selects (value mirrors).

        ``None`` selects every node.
        """
        resolver: Resolver = wants if wants is not None else _everything
        self._resolvers.append(resolver)
        self._resolve_all = any(r is _everything for r in self._resolvers)

        def remove() -> None:
            self._resolvers.remove(resolver)
            self._resolve_all = any(r is _everything for r in self._resolvers)

        return remove

    def resolve(self, nodes: list[Node]) -> None:
        """Bring dirty derived nodes up to date as one flush; compute errors stay on the nodes."""
        with self._batch:
            for node in nodes:
                if node._derived and not node._disposed and node._state != CLEAN:
                    with suppress(GraphError):  # held on the node: its readers get the error
                        node._update()

    # --- internals ---------------------------------------------------------------------------

    def named(self, name: str) -> Node:
        """The live node called ``name``; GraphError if there is none."""
        node = self._names.get(name)
        if node is None:
            raise GraphError(f"no live node named {name!r}", path=f"name/{name}")
        return node

    def _check_name(self, name: str | None) -> None:
        """A name is a node key on the wire (``a`` or ``a/b``), unique among live nodes."""
        if name is None:
            return
        if len(name) > NODE_KEY_MAX or not re.fullmatch(NODE_KEY_PATTERN, name):
            raise GraphError(
                f"bad node name {name!r}: 1 to {NODE_KEY_MAX} characters, non-empty parts "
                "joined by '/' (like 'score' or 'players/ada')",
                path="name",
            )
        if name in self._names:
            raise GraphError(
                f"name {name!r} is taken by node {self._names[name].id}", path=f"name/{name}"
            )

    def _next_id(self) -> int:
        if self._free:
            return self._free.pop()
        node_id = len(self._nodes)
        if node_id > MAX_SAFE_ID:
            raise GraphError("node ids exhausted (limit 2**53)")
        self._nodes.append(None)
        return node_id

    def _add(self, node: Node) -> None:
        if self._computing:
            self._free.append(node.id)
            raise GraphError("nodes cannot be created while a memo or signal computes")
        self._nodes[node.id] = node
        if node._name is not None:
            self._names[node._name] = node
        if node._wire:
            node._gen = self._gen
            node._start = ADDED
            self._touched.append(node)
        if node._eager:
            node._queued = True
            self._eager.append(node)
        if self._depth == 0:
            self._flush()

    def _mark(self, observers: dict[Node, None]) -> None:
        """Direct dependents of a changed node become DIRTY, everything further CHECK."""
        gen = self._gen
        stack: list[Node] = []
        for node in observers:
            state = node._state
            if state == CLEAN:
                if node._wire and node._gen != gen:
                    node._record()
                node._state = DIRTY
                if node._observers:
                    stack.append(node)
            elif state == CHECK:
                node._state = DIRTY
            if node._eager and not node._queued:
                node._queued = True
                self._eager.append(node)
        while stack:
            for node in stack.pop()._observers:
                if node._state == CLEAN:
                    if node._wire and node._gen != gen:
                        node._record()
                    node._state = CHECK
                    if node._observers:
                        stack.append(node)
                if node._eager and not node._queued:
                    node._queued = True
                    self._eager.append(node)

    def _dispose(self, node: Node) -> None:
        if node._wire and node._gen != self._gen:
            node._record()
        node._disposed = True
        if node._name is not None:
            del self._names[node._name]
        self._nodes[node.id] = None
        self._free.append(node.id)
        for source in node._sources:
            source._observers.pop(node, None)
        observers = node._observers
        if observers:
            for dependent in observers:
                if dependent._wire and dependent._gen != self._gen:
                    dependent._record()
                dependent._sources = {s: None for s in dependent._sources if s is not node}
            self._mark(observers)
            node._observers = {}
        if self._depth == 0:
            self._flush()

    def _exit(self) -> None:
        self._depth -= 1
        if self._depth == 0 and (self._touched or self._eager):
            self._flush()

    def _flush(self) -> None:
        run_flush(self)
