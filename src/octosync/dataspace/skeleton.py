"""The skeleton index of "Efficient, Imperative Dataspaces" (Garnock-Jones, 2019).

``Index = Bag(V) x Node``. A ``Node`` holds a ``Continuation`` and edges
``Selector -> Class -> Node`` laid out from handler shapes; a ``Continuation`` caches the
asserted values that fit its shape and maps constant paths -> constant values -> ``Leaf``; a
``Leaf`` caches the values that also carry those constants and maps capture paths ->
``Handler``; a ``Handler`` keeps a bag of capture vectors and the observers to call.

Adding, removing and sending all go through :func:`modify`, one traversal
parameterised by three update procedures (continuation, leaf, handler), as in the seed. The
cost of an event is the length of the trie path it follows plus one hash lookup per constant
map on it, not the number of observers.

Deviation from the seed, for long-running servers: when the last handler of a constant map
goes, the whole constant map (with its value-only leaves) is dropped; it is rebuilt from the
continuation's cache if a handler needs it again. Shapes (nodes) stay, as the seed assumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeAlias

from octosync.dataspace.pattern import (
    Path,
    Paths,
    Shape,
    Skeleton,
    capture_projector,
    constant_projector,
    project,
)
from octosync.dataspace.values import Class, Key, Record, Value, classof

Captures: TypeAlias = tuple[Value, ...]
Callback: TypeAlias = Callable[[Captures], object]
Selector: TypeAlias = tuple[int, Value]
"""``(pop count, index)``: pop that many stack entries, then step to child ``index``."""

ADD: Final = 0
REMOVE: Final = 1
MESSAGE: Final = 2


class Observer:
    """One installed interest: the callbacks for ``+``, ``-`` and ``!`` (any may be None)."""

    __slots__ = ("on_add", "on_message", "on_remove")

    def __init__(
        self,
        on_add: Callback | None = None,
        on_remove: Callback | None = None,
        on_message: Callback | None = None,
    ) -> None:
        self.on_add = on_add
        self.on_remove = on_remove
        self.on_message = on_message


class Handler:
    """``Bag([V]) x callbacks``: capture vectors currently matched, and who to tell."""

    __slots__ = ("adders", "bag", "capture", "messengers", "observers", "removers")

    def __init__(self, capture_paths: Paths) -> None:
        self.capture = capture_projector(capture_paths)
        self.bag: dict[tuple[Key, ...], int] = {}
        self.observers: list[Observer] = []
        self.adders: tuple[Callback, ...] = ()
        self.removers: tuple[Callback, ...] = ()
        self.messengers: tuple[Callback, ...] = ()

    def refresh(self) -> None:
        """Re-derive the per-event callback tuples so dispatch needs no None checks."""
        obs = self.observers
        self.adders = tuple(o.on_add for o in obs if o.on_add is not None)
        self.removers = tuple(o.on_remove for o in obs if o.on_remove is not None)
        self.messengers = tuple(o.on_message for o in obs if o.on_message is not None)


class Leaf:
    """``P(V) x ([H] -> Handler)``: values carrying one set of constants, and their handlers."""

    __slots__ = ("cache", "handlers")

    def __init__(self) -> None:
        self.cache: dict[Key, Value] = {}
        self.handlers: dict[Paths, Handler] = {}


class ConstantMap:
    """``[V] -> Leaf`` for one list of constant paths, with its compiled projection."""

    __slots__ = ("handler_count", "leaves", "project")

    def __init__(self, paths: Paths) -> None:
        self.project = constant_projector(paths)
        self.leaves: dict[tuple[Key, ...], Leaf] = {}
        self.handler_count = 0


class Continuation:
    """``P(V) x ([H] -> [V] -> Leaf)``: values that fit this node's shape, by constants."""

    __slots__ = ("cache", "table")

    def __init__(self, cache: dict[Key, Value]) -> None:
        self.cache = cache
        self.table: dict[Paths, ConstantMap] = {}


class Node:
    """``Continuation x (Selector -> Class -> Node)``."""

    __slots__ = ("cont", "edges")

    def __init__(self, cont: Continuation) -> None:
        self.cont = cont
        self.edges: dict[Selector, dict[Class, Node]] = {}


ContUpdate: TypeAlias = Callable[[Continuation, Key, Value], None]
LeafUpdate: TypeAlias = Callable[[Leaf, Key, Value], None]
HandlerUpdate: TypeAlias = Callable[[Handler, Captures, tuple[Key, ...]], None]


# The three families of update procedures (seed: add_*, del_*, send_*).


def _add_cont(cont: Continuation, k: Key, v: Value) -> None:
    cont.cache[k] = v


def _add_leaf(leaf: Leaf, k: Key, v: Value) -> None:
    leaf.cache[k] = v


def _add_handler(handler: Handler, caps: Captures, ck: tuple[Key, ...]) -> None:
    bag = handler.bag
    n = bag.get(ck, 0)
    bag[ck] = n + 1
    if n == 0:
        for f in handler.adders:
            f(caps)


def _del_cont(cont: Continuation, k: Key, v: Value) -> None:
    del cont.cache[k]


def _del_leaf(leaf: Leaf, k: Key, v: Value) -> None:
    del leaf.cache[k]


def _del_handler(handler: Handler, caps: Captures, ck: tuple[Key, ...]) -> None:
    bag = handler.bag
    n = bag[ck] - 1
    if n:
        bag[ck] = n
    else:
        del bag[ck]
        for f in handler.removers:
            f(caps)


def _send_nothing(_obj: object, k: Key, v: Value) -> None:
    return None


def _send_handler(handler: Handler, caps: Captures, ck: tuple[Key, ...]) -> None:
    for f in handler.messengers:
        f(caps)


class Index:
    """Every asserted value (as a bag) and every installed handler, in one trie.

    The seed's root ``Bag(V)`` is split in two: presence is the root continuation's cache
    (which holds every asserted value anyway) and ``extra`` counts only values asserted more
    than once, so the usual single copy costs no second hash table entry.
    """

    __slots__ = ("extra", "root")

    def __init__(self) -> None:
        self.extra: dict[Key, int] = {}
        self.root = Node(Continuation({}))

    # -- assertions and messages -------------------------------------------------------------

    def add_assertion(self, k: Key, v: Value) -> None:
        """Count one more copy of ``v``; observers hear ``+`` only when it first appears."""
        root = self.root
        if k in root.cont.cache:
            bag = self.extra
            bag[k] = bag.get(k, 1) + 1
            return
        modify(root, ((v,), None), ADD, v, k, _add_cont, _add_leaf, _add_handler)

    def remove_assertion(self, k: Key) -> None:
        """Count one copy fewer; observers hear ``-`` only when the last copy goes."""
        bag = self.extra
        if bag:
            n = bag.get(k)
            if n is not None:
                if n == 2:
                    del bag[k]
                else:
                    bag[k] = n - 1
                return
        root = self.root
        v = root.cont.cache[k]
        modify(root, ((v,), None), REMOVE, v, k, _del_cont, _del_leaf, _del_handler)

    def send_message(self, v: Value, k: Key) -> None:
        """Deliver ``v`` as ``!`` to matching handlers; the caches are not touched."""
        modify(self.root, ((v,), None), MESSAGE, v, k, _send_nothing, _send_nothing, _send_handler)

    def count(self, k: Key) -> int:
        """How many copies of the value with key ``k`` are asserted."""
        if k not in self.root.cont.cache:
            return 0
        return self.extra.get(k, 1)

    # -- handlers ------------------------------------------------------------------------------

    def extend(self, shape: Shape | None) -> Continuation:
        """Lay ``shape`` out as a path of nodes (creating missing ones) and return the
        continuation at its end (seed: ``extend``); new nodes get their cache from the parent."""
        if shape is None:
            return self.root.cont
        _pop, node = _extend_node((), self.root, 0, 0, shape)
        return node.cont

    def add_handler(self, sk: Skeleton, observer: Observer) -> None:
        """Install ``observer`` and replay ``+`` for every distinct capture vector that
        already matches, in the order the matching values were asserted."""
        cont = self.extend(sk.shape)
        cmap = cont.table.get(sk.const_paths)
        if cmap is None:
            cmap = ConstantMap(sk.const_paths)
            cont.table[sk.const_paths] = cmap
            leaves = cmap.leaves
            for k, v in cont.cache.items():
                ck = cmap.project(v)
                leaf = leaves.get(ck)
                if leaf is None:
                    leaf = leaves[ck] = Leaf()
                leaf.cache[k] = v
        leaf = cmap.leaves.get(sk.const_key)
        if leaf is None:
            leaf = cmap.leaves[sk.const_key] = Leaf()
        handler = leaf.handlers.get(sk.capture_paths)
        fresh = handler is None
        if handler is None:
            handler = leaf.handlers[sk.capture_paths] = Handler(sk.capture_paths)
            cmap.handler_count += 1
        handler.observers.append(observer)
        handler.refresh()
        bag = handler.bag
        seen: set[tuple[Key, ...]] = set()
        on_add = observer.on_add
        for v in leaf.cache.values():
            caps, ck = handler.capture(v)
            if fresh:
                n = bag.get(ck, 0)
                bag[ck] = n + 1
                first = n == 0
            else:
                first = ck not in seen
                seen.add(ck)
            if first and on_add is not None:
                on_add(caps)

    def remove_handler(self, sk: Skeleton, observer: Observer) -> bool:
        """Uninstall ``observer`` (no events are sent to it) and prune what became empty.
        Returns False if it was not installed."""
        cont = self.extend(sk.shape)
        cmap = cont.table.get(sk.const_paths)
        if cmap is None:
            return False
        leaf = cmap.leaves.get(sk.const_key)
        if leaf is None:
            return False
        handler = leaf.handlers.get(sk.capture_paths)
        if handler is None or not any(o is observer for o in handler.observers):
            return False
        handler.observers = [o for o in handler.observers if o is not observer]
        handler.refresh()
        if handler.observers:
            return True
        del leaf.handlers[sk.capture_paths]
        cmap.handler_count -= 1
        if cmap.handler_count == 0:
            del cont.table[sk.const_paths]
        elif not leaf.cache and not leaf.handlers:
            del cmap.leaves[sk.const_key]
        return True


def _extend_node(h: Path, node: Node, n_pop: int, index: Value, shape: Shape) -> tuple[int, Node]:
    """Seed's ``walk-node`` for a constructor shape; ``*`` children are skipped by the caller."""
    sel = (n_pop, index)
    table = node.edges.get(sel)
    if table is None:
        table = node.edges[sel] = {}
    nxt = table.get(shape.cls)
    if nxt is None:
        cls = shape.cls
        inner = {k: v for k, v in node.cont.cache.items() if classof(project(v, h)) == cls}
        nxt = table[cls] = Node(Continuation(inner))
    pop = 0
    for step, sub in shape.children:
        if sub is not None:
            pop, nxt = _extend_node((*h, step), nxt, pop, step[1], sub)
    return pop + 1, nxt


def modify(
    node: Node,
    stack: tuple[Value, object],
    op: int,
    v: Value,
    k: Key,
    m_cont: ContUpdate,
    m_leaf: LeafUpdate,
    m_handler: HandlerUpdate,
) -> None:
    """The one traversal (seed: ``modify``, ``walk-node``, ``walk-cont``), parameterised by
    the update procedures for continuations, leaves and handlers.

    Updates this node's continuation, its leaves and handlers, then follows every edge whose
    class the value has at that selector. ``stack`` is a cons list ``(top, rest)`` of
    enclosing values; from the root it is ``((v,), None)``: the outermost wrapper makes the
    first move (selector ``(0, 0)``) land on ``v`` itself.
    """
    cont = node.cont
    m_cont(cont, k, v)
    if cont.table:
        emptied: list[Paths] | None = None
        for paths, cmap in cont.table.items():
            consts = cmap.project(v)
            leaves = cmap.leaves
            leaf = leaves.get(consts)
            if leaf is None:
                if op != ADD:
                    continue
                leaf = leaves[consts] = Leaf()
            m_leaf(leaf, k, v)
            for handler in leaf.handlers.values():
                caps, ck = handler.capture(v)
                m_handler(handler, caps, ck)
            if op == REMOVE and not leaf.cache and not leaf.handlers:
                del leaves[consts]
                if not leaves:
                    emptied = [paths] if emptied is None else [*emptied, paths]
        if emptied is not None:  # deleted after the loop: never mutate a dict being iterated
            for paths in emptied:
                del cont.table[paths]
    for (n_pop, index), classes in node.edges.items():
        s: object = stack
        while n_pop:
            s = s[1]  # type: ignore[index]
            n_pop -= 1
        c = s[0]  # type: ignore[index]
        child = c.fields[index] if type(c) is Record else c[index]
        t = type(child)
        if t is Record:
            nxt = classes.get(child._class)
        elif t is list or t is dict:
            nxt = classes.get(classof(child))  # type: ignore[arg-type]
        else:
            continue
        if nxt is not None:
            modify(nxt, (child, s), op, v, k, m_cont, m_leaf, m_handler)
