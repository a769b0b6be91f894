"""Graph nodes: writable cells, lazy memos, eager signals and effects.

Propagation is push-dirty / pull-value: a write marks direct dependents DIRTY and everything
further downstream CHECK ("maybe dirty"); a read brings a node up to date by first updating
its sources in the order it read them, and recomputes only if one of them really changed.
Because every read pulls through this check, no computation can observe a mix of old and new
inputs, whatever order the flush visits eager nodes in (glitch-free by construction).

Every state change of a wire-visible node first *records* the node in the context's pending
change set (once per flush), keeping the state it had before; the flush compares before and
after, which is what gives the equality guard and memo suppression at the set level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from octosync.errors import ComputeError, CycleError, GraphError
from octosync.graph.type_tags import TypeRegistry

T = TypeVar("T")


class Graph(Protocol):
    """What a node uses of the graph it belongs to (``graph.context.Context``): declared here
    so that nodes depend on a shape, and the context, which makes nodes, is the only module
    that knows both."""

    registry: TypeRegistry
    _depth: int
    _computing: int
    _tracking: dict[Node, None] | None
    _gen: int
    _touched: list[Node]
    _eager: list[Node]

    def _dispose(self, node: Node) -> None: ...

    def _mark(self, observers: dict[Node, None]) -> None: ...

    def _flush(self) -> None: ...

    def _exit(self) -> None: ...


CLEAN = 0
CHECK = 1
DIRTY = 2

ADDED = 0
"""``Node._start``: created during the pending flush."""
RESOLVED = 1
"""``Node._start``: had a value the receiver holds when the pending flush began."""
UNRESOLVED = 2
"""``Node._start``: dirty or never computed when the pending flush began."""


class _NoValue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


def same_value(a: object, b: object) -> bool:
    """The equality guard: identical, or equal and of the same type (1 and True differ)."""
    return a is b or (type(a) is type(b) and a == b)


class Node:
    """Base of every node; slots for all kinds live here so subclasses stay slot-only."""

    __slots__ = (
        "_computing",
        "_ctx",
        "_disposed",
        "_encode",
        "_fn",
        "_gen",
        "_name",
        "_observers",
        "_payload",
        "_queued",
        "_sources",
        "_start",
        "_start_sources",
        "_start_value",
        "_state",
        "_type_tag",
        "_value",
        "id",
    )
    kind: ClassVar[str] = "node"
    _wire: ClassVar[bool] = True
    """Serialised on the wire (effects are local execution state and are not)."""
    _derived: ClassVar[bool] = False
    _eager: ClassVar[bool] = False

    _ctx: Graph
    id: int
    _observers: dict[Node, None]
    _sources: dict[Node, None]
    _start_sources: dict[Node, None]
    _fn: Callable[[], Any]

    def _update(self) -> None:
        """Bring the node up to date (cells always are)."""

    def _recompute(self) -> None:
        """Run the node's function (cells have none)."""

    def _init(self, ctx: Graph, node_id: int, type_tag: str | None) -> None:
        self._ctx = ctx
        self.id = node_id
        self._disposed = False
        self._observers = {}
        self._sources = {}
        self._start_sources = self._sources
        self._gen = -1
        self._start = ADDED
        self._start_value = NO_VALUE
        self._value = NO_VALUE
        self._payload: bytes | None = None
        self._state = DIRTY
        self._queued = False
        self._computing = False
        self._type_tag = type_tag
        self._name: str | None = None
        self._encode: Callable[[Any], bytes] | None = (
            ctx.registry.get(type_tag).encode if type_tag is not None else None
        )

    @property
    def type_tag(self) -> str | None:
        return self._type_tag

    @property
    def name(self) -> str | None:
        """The node's name (``Context.cell(..., name=...)``), sent to peers as its key."""
        return self._name

    @property
    def disposed(self) -> bool:
        return self._disposed

    @property
    def resolved(self) -> bool:
        """Holds a current value (what a snapshot calls ``resolved``)."""
        return self._state == CLEAN and self._value is not NO_VALUE

    @property
    def payload(self) -> bytes | None:
        """The current value encoded with the node's type tag; None unless resolved."""
        return self._payload if self.resolved else None

    @property
    def dependencies(self) -> tuple[Node, ...]:
        """Nodes read by the last computation, in first-read order."""
        return tuple(self._sources)

    @property
    def dependents(self) -> tuple[Node, ...]:
        return tuple(self._observers)

    def _record(self) -> None:
        """Remember the pre-flush state once per flush, before anything about it changes."""
        ctx = self._ctx
        self._gen = ctx._gen
        self._start = (
            RESOLVED if self._state == CLEAN and self._value is not NO_VALUE else UNRESOLVED
        )
        self._start_value = self._value
        self._start_sources = self._sources
        ctx._touched.append(self)

    def _check_alive(self) -> None:
        if self._disposed:
            raise GraphError(f"node {self.id} ({self.kind}) was disposed", path=f"node/{self.id}")

    def dispose(self) -> None:
        """Remove the node; dependents become dirty and fail if they read it again."""
        self._check_alive()
        ctx = self._ctx
        if ctx._computing:
            raise GraphError(f"node {self.id} cannot be disposed while a memo or signal computes")
        ctx._dispose(self)

    def __repr__(self) -> str:
        state = "disposed" if self._disposed else ("clean", "check", "dirty")[self._state]
        return f"<{self.kind} {self.id} {state} {self._value!r}>"


class Cell(Node, Generic[T]):
    """A writable source value."""

    __slots__ = ()
    kind = "cell"

    def get(self) -> T:
        if self._disposed:
            self._check_alive()
        tracking = self._ctx._tracking
        if tracking is not None:
            tracking[self] = None
        value: T = self._value
        return value

    def peek(self) -> T:
        """Read without becoming a dependency of the running computation."""
        self._check_alive()
        value: T = self._value
        return value

    def set(self, value: T) -> None:
        """Write; an equal value changes nothing. Outside a batch this flushes at once."""
        if self._disposed:
            self._check_alive()
        old = self._value
        if old is value or (type(old) is type(value) and old == value):
            return
        ctx = self._ctx
        if ctx._computing:
            raise GraphError(
                f"cell {self.id} cannot be written while a memo or signal computes",
                path=f"node/{self.id}",
            )
        assert self._encode is not None
        payload = self._encode(value)  # a value the tag cannot carry is refused before any change
        if self._gen != ctx._gen:  # _record(), inlined: this is the hottest path
            self._gen = ctx._gen
            self._start = RESOLVED
            self._start_value = old
            ctx._touched.append(self)
        self._value = value
        self._payload = payload
        if self._observers:
            ctx._mark(self._observers)
        if ctx._depth == 0:
            ctx._flush()


class Computed(Node):
    """Shared compute machinery of memos, signals and effects."""

    __slots__ = ()

    def _update(self) -> None:
        """Bring this node up to date: check sources in read order, recompute if one changed.

        The walk down through "maybe dirty" sources uses an explicit stack, so a long chain
        does not hit Python's recursion limit when a change at its root is pulled through.
        """
        gen = self._ctx._gen
        if self._wire and self._gen != gen:
            self._record()
        if self._state != CHECK:
            if self._state == DIRTY:
                self._recompute()
            return
        stack: list[tuple[Node, Iterator[Node]]] = [(self, iter(self._sources))]
        walking: set[Node] = {self}  # a source cycle (left by a compute that swallowed a
        # CycleError) must not loop forever
        while stack:
            node, sources = stack[-1]
            if node._state == CHECK:
                child = None
                for source in sources:
                    if source._derived and source._state != CLEAN:
                        child = source
                        break
                if child is not None:
                    if child._wire and child._gen != gen:
                        child._record()
                    if child._state == CHECK:
                        if child in walking:
                            raise CycleError(
                                f"{child.kind} {child.id} depends on itself",
                                path=f"node/{child.id}",
                            )
                        walking.add(child)
                        stack.append((child, iter(child._sources)))
                        continue
                    try:
                        child._recompute()  # if its value changed, node is DIRTY now
                    except GraphError:
                        node._state = DIRTY  # node recomputes, reads it, reports the error
                    continue
            stack.pop()
            walking.discard(node)
            if node._state == DIRTY:
                try:
                    node._recompute()
                except GraphError:
                    if not stack:
                        raise
                    stack[-1][0]._state = DIRTY
            else:
                node._state = CLEAN

    def _recompute(self) -> None:
        ctx = self._ctx
        if self._computing:
            raise CycleError(
                f"node {self.id} ({self.kind}) depends on itself", path=f"node/{self.id}"
            )
        outer = ctx._tracking
        sources: dict[Node, None] = {}
        ctx._tracking = sources
        self._computing = True
        derived = self._derived
        if derived:
            ctx._computing += 1
        try:
            value = self._fn()
            payload = self._encode(value) if self._encode is not None else None
        except GraphError:
            self._failed()
            raise
        except Exception as exc:
            self._failed()
            raise ComputeError(
                f"{self.kind} {self.id} raised {type(exc).__name__}: {exc}", path=f"node/{self.id}"
            ) from exc
        finally:
            ctx._tracking = outer
            self._computing = False
            if derived:
                ctx._computing -= 1
            self._set_sources(sources)
        # An effect that wrote its own input while running was queued again: run it again.
        self._state = DIRTY if self._queued and not derived else CLEAN
        old = self._value
        if not (old is value or (type(old) is type(value) and old == value)):
            self._value = value
            self._payload = payload
            for observer in self._observers:
                if observer._state == CHECK:
                    observer._state = DIRTY

    def _failed(self) -> None:
        """A failed compute is never cached: memos and signals stay dirty."""
        self._state = DIRTY

    def _set_sources(self, new: dict[Node, None]) -> None:
        old = self._sources
        if old.keys() == new.keys():
            return
        for source in old:
            if source not in new:
                source._observers.pop(self, None)
        for source in new:
            if source not in old and not source._disposed:
                source._observers[self] = None
        self._sources = new


class Derived(Computed, Generic[T]):
    """A computed value node; see Memo and Signal."""

    __slots__ = ()
    _derived = True

    def get(self) -> T:
        if self._disposed:
            self._check_alive()
        ctx = self._ctx
        tracking = ctx._tracking
        if tracking is not None:
            tracking[self] = None
        if self._state != CLEAN:
            if self._computing:
                raise CycleError(f"{self.kind} {self.id} depends on itself", path=f"node/{self.id}")
            if ctx._depth == 0:
                ctx._depth = 1  # a recompute outside a batch is published as its own flush
                try:
                    self._update()
                finally:
                    ctx._exit()
            else:
                self._update()
        value: T = self._value
        return value

    def set(self, value: object) -> None:
        """Derived nodes are computed, never written: always a GraphError."""
        raise GraphError(
            f"{self.kind} {self.id} is derived and cannot be written", path=f"node/{self.id}"
        )


class Memo(Derived[T]):
    """Lazy: recomputed when read while dirty; an equal result dirties nothing downstream."""

    __slots__ = ()
    kind = "memo"


class Signal(Derived[T]):
    """Eager: recomputed during the flush, so its published value is always concrete."""

    __slots__ = ()
    kind = "signal"
    _eager = True


class Effect(Computed):
    """Runs its function after a flush that changed anything it read; not on the wire."""

    __slots__ = ()
    kind = "effect"
    _wire = False
    _eager = True

    def _failed(self) -> None:
        # Stay subscribed to what it read so a later change runs it again.
        self._state = CLEAN

    def run(self) -> None:
        """Run again now (or at the end of the current batch), whatever changed."""
        self._check_alive()
        ctx = self._ctx
        self._state = DIRTY
        if not self._queued:
            self._queued = True
            ctx._eager.append(self)
        if ctx._depth == 0:
            ctx._flush()
