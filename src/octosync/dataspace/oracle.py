"""The brute-force reference: ``match`` and a dataspace that loops over every observer.

This is what the skeleton index must agree with (tests) and beat (benchmark). It shares no
code with the index beyond the value types: constants are compared with :func:`values_equal`
and bags are keyed by :func:`canonical_text`, both written independently of the index's keys,
so a flaw in :func:`~octosync.dataspace.values.key` cannot hide in both.
"""

from __future__ import annotations

from collections.abc import Iterable

from octosync.dataspace.pattern import analyse
from octosync.dataspace.skeleton import Callback, Captures
from octosync.dataspace.values import (
    Capture,
    Discard,
    Observe,
    Record,
    Value,
    checked_key,
    values_equal,
)
from octosync.errors import UnknownHandle


def canonical_text(v: Value) -> str:
    """A text that two values share exactly when they are equal and of the same types."""
    t = type(v)
    if t is float:
        return "float:nan" if v != v else f"float:{v + 0.0!r}"  # + 0.0 folds -0.0 into 0.0
    if t is Record:
        fields = ",".join(canonical_text(f) for f in v.fields)
        return f"record({canonical_text(v.label)};{fields})"
    if t is list:
        return "list[" + ",".join(canonical_text(x) for x in v) + "]"
    if t is dict:
        entries = sorted(f"{canonical_text(k)}={canonical_text(x)}" for k, x in v.items())
        return "dict{" + ",".join(entries) + "}"
    if t is frozenset:
        return "set{" + ",".join(sorted(canonical_text(x) for x in v)) + "}"
    if t is Capture:
        return f"capture({canonical_text(v.sub)})"
    if t is Discard:
        return "discard"
    return f"{t.__name__}:{v!r}"


def match(pattern: Value, value: Value) -> Captures | None:
    """The values captured when ``pattern`` matches ``value`` (in pattern order), else None."""
    caps: list[Value] = []
    return tuple(caps) if _match(pattern, value, caps) else None


def _match(p: Value, v: Value, caps: list[Value]) -> bool:
    t = type(p)
    if t is Discard:
        return True
    if t is Capture:
        caps.append(v)
        return _match(p.sub, v, caps)
    if t is Record:
        return (
            type(v) is Record
            and values_equal(p.label, v.label)
            and len(p.fields) == len(v.fields)
            and all(_match(pf, vf, caps) for pf, vf in zip(p.fields, v.fields, strict=True))
        )
    if t is list:
        return (
            type(v) is list
            and len(p) == len(v)
            and all(_match(px, vx, caps) for px, vx in zip(p, v, strict=True))
        )
    if t is dict:
        if type(v) is not dict or len(p) != len(v):
            return False
        for pk, px in p.items():
            partner = [vk for vk in v if values_equal(pk, vk)]
            if not partner or not _match(px, v[partner[0]], caps):
                return False
        return True
    return values_equal(p, v)


class _Watcher:
    __slots__ = ("bag", "on_add", "on_message", "on_remove", "pattern")

    def __init__(
        self,
        pattern: Value,
        on_add: Callback | None,
        on_remove: Callback | None,
        on_message: Callback | None,
    ) -> None:
        self.pattern = pattern
        self.on_add = on_add
        self.on_remove = on_remove
        self.on_message = on_message
        self.bag: dict[tuple[str, ...], int] = {}


def _caps_key(caps: Captures) -> tuple[str, ...]:
    return tuple(canonical_text(c) for c in caps)


class BruteForceDataspace:
    """Same operations and events as :class:`~octosync.dataspace.Dataspace`, by matching
    every value against every observer's pattern. No re-entrant calls from callbacks."""

    def __init__(self) -> None:
        self._values: dict[str, list[Value]] = {}  # text -> [count, value], in arrival order
        self._handles: dict[int, str] = {}
        self._watchers: dict[int, _Watcher] = {}
        self._next_handle = 1

    def assert_(self, value: Value) -> int:
        k = self._text(value)
        h = self._new_handle(k)
        self._add(k, value)
        return h

    def retract(self, handle: int) -> None:
        if type(handle) is not int or handle not in self._handles:
            raise UnknownHandle(
                f"no live assertion or observer has handle {handle!r}", path="handle"
            )
        self._retract_now(handle)

    def send(self, message: Value) -> None:
        checked_key(message, "message")
        for w in list(self._watchers.values()):
            caps = match(w.pattern, message)
            if caps is not None and w.on_message is not None:
                w.on_message(caps)

    def observe(
        self,
        pattern: Value,
        on_add: Callback | None = None,
        on_remove: Callback | None = None,
        on_message: Callback | None = None,
    ) -> int:
        analyse(pattern)  # the same input checks as the index
        interest = Observe(pattern)
        k = canonical_text(interest)
        h = self._new_handle(k)
        self._add(k, interest)
        w = _Watcher(pattern, on_add, on_remove, on_message)
        self._watchers[h] = w
        for _count, value in self._values.values():
            caps = match(pattern, value)
            if caps is None:
                continue
            ck = _caps_key(caps)
            n = w.bag.get(ck, 0)
            w.bag[ck] = n + 1
            if n == 0 and on_add is not None:
                on_add(caps)
        return h

    def patch(self, asserts: Iterable[Value] = (), retracts: Iterable[int] = ()) -> list[int]:
        values = list(asserts)
        handles = list(retracts)
        keys = [self._text(v, f"asserts[{i}]") for i, v in enumerate(values)]
        for i, h in enumerate(handles):
            if type(h) is not int or h not in self._handles or h in handles[:i]:
                raise UnknownHandle(
                    f"handle {h!r} is not live (or is retracted twice in this patch)",
                    path=f"retracts[{i}]",
                )
        new = [self._new_handle(k) for k in keys]
        for k, v in zip(keys, values, strict=True):
            self._add(k, v)
        for h in handles:
            self._retract_now(h)
        return new

    def count(self, value: Value) -> int:
        entry = self._values.get(self._text(value))
        return 0 if entry is None else int(entry[0])

    @staticmethod
    def _text(value: Value, path: str = "$") -> str:
        checked_key(value, path)  # the same input errors as the index
        return canonical_text(value)

    def _new_handle(self, k: str) -> int:
        h = self._next_handle
        self._next_handle = h + 1
        self._handles[h] = k
        return h

    def _retract_now(self, handle: int) -> None:
        k = self._handles.pop(handle)
        self._watchers.pop(handle, None)
        entry = self._values[k]
        entry[0] -= 1
        if entry[0]:
            return
        del self._values[k]
        value = entry[1]
        for w in list(self._watchers.values()):
            caps = match(w.pattern, value)
            if caps is None:
                continue
            ck = _caps_key(caps)
            n = w.bag[ck] - 1
            if n:
                w.bag[ck] = n
            else:
                del w.bag[ck]
                if w.on_remove is not None:
                    w.on_remove(caps)

    def _add(self, k: str, value: Value) -> None:
        entry = self._values.get(k)
        if entry is not None:
            entry[0] += 1
            return
        self._values[k] = [1, value]
        for w in list(self._watchers.values()):
            caps = match(w.pattern, value)
            if caps is None:
                continue
            ck = _caps_key(caps)
            n = w.bag.get(ck, 0)
            w.bag[ck] = n + 1
            if n == 0 and w.on_add is not None:
                w.on_add(caps)
