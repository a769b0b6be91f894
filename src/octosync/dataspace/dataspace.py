"""``Dataspace``: handles, bag semantics, patches and observers over the skeleton index.

Observers are told ``+`` when a capture vector starts matching, ``-`` when it stops and ``!``
for each matching message. Interest is public: ``observe`` asserts ``Observe(pattern)``, so
other observers can see who is listening. Operations started from inside a callback are queued
and run after the current one (run to completion), so the index is never changed while it is
being walked. Callbacks must not raise: an exception escapes to the caller with the event
half-delivered (queued operations are dropped).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

from octosync.dataspace.pattern import Skeleton, analyse
from octosync.dataspace.skeleton import Callback, Index, Observer
from octosync.dataspace.values import Key, Observe, Value, checked_key, key
from octosync.errors import InvalidValue, UnknownHandle

_MISSING: Final = object()


class _Interest:
    """An observer as the dataspace tracks it: its skeleton and its own Observe assertion."""

    __slots__ = ("observer", "skeleton")

    def __init__(self, skeleton: Skeleton, observer: Observer) -> None:
        self.skeleton = skeleton
        self.observer = observer


class Dataspace:
    """Assertions and interests in one skeleton index; see the module docstring."""

    __slots__ = ("_busy", "_handles", "_index", "_interests", "_next_handle", "_pending")

    def __init__(self) -> None:
        self._index = Index()
        self._handles: dict[int, Key] = {}
        self._interests: dict[int, _Interest] = {}
        self._next_handle = 1
        self._busy = False
        self._pending: deque[tuple[Callable[..., None], tuple[object, ...]]] = deque()

    # -- the public operations ------------------------------------------------------------------

    def assert_(self, value: Value) -> int:
        """Assert ``value`` (one more copy); returns the handle that retracts this copy."""
        try:
            k = key(value)
        except InvalidValue:
            k = checked_key(value)
        h = self._next_handle
        self._next_handle = h + 1
        self._handles[h] = k
        self._run(self._index.add_assertion, k, value)
        return h

    def retract(self, handle: int) -> None:
        """Retract the copy (or the observer) behind ``handle``; unknown handles raise
        :class:`UnknownHandle` and change nothing."""
        k = self._handles.pop(handle, _MISSING) if type(handle) is int else _MISSING
        if k is _MISSING:
            raise UnknownHandle(
                f"no live assertion or observer has handle {handle!r}", path="handle"
            )
        interest = self._interests.pop(handle, None) if self._interests else None
        if interest is None:
            self._run(self._index.remove_assertion, k)
        else:
            self._run(self._retract_now, k, interest)

    def send(self, message: Value) -> None:
        """Deliver ``message`` to every observer whose pattern matches it, as ``!``."""
        try:
            k = key(message)
        except InvalidValue:
            k = checked_key(message, "message")
        self._run(self._index.send_message, message, k)

    def observe(
        self,
        pattern: Value,
        on_add: Callback | None = None,
        on_remove: Callback | None = None,
        on_message: Callback | None = None,
        *,
        interest: Value = _MISSING,
    ) -> int:
        """Install interest in ``pattern``; callbacks get the tuple of captured values.

        First the interest is asserted (``Observe(pattern)`` unless ``interest`` names the
        value to assert, as a relay does with the wire's own ``Observe`` record), so existing
        observers of interest hear of it; then the handler is installed and told ``+`` for
        what already matches. Retract the returned handle to remove both.
        """
        skeleton = analyse(pattern)
        interest_value = Observe(pattern) if interest is _MISSING else interest
        k = checked_key(interest_value, "interest")
        h = self._next_handle
        self._next_handle = h + 1
        self._handles[h] = k
        interest = _Interest(skeleton, Observer(on_add, on_remove, on_message))
        self._interests[h] = interest

        def install() -> None:
            self._index.add_assertion(k, interest_value)
            self._index.add_handler(skeleton, interest.observer)

        self._run(install)
        return h

    def patch(self, asserts: Iterable[Value] = (), retracts: Iterable[int] = ()) -> list[int]:
        """Apply several asserts and retracts as one change: every addition is processed
        before any removal, so no observer sees a value vanish and come back (no glitch).
        Everything is checked first; a bad value or handle raises and changes nothing."""
        values = list(asserts)
        handles = list(retracts)
        keys = [checked_key(v, f"asserts[{i}]") for i, v in enumerate(values)]
        seen: set[int] = set()
        for i, h in enumerate(handles):
            if type(h) is not int or h not in self._handles or h in seen:
                raise UnknownHandle(
                    f"handle {h!r} is not live (or is retracted twice in this patch)",
                    path=f"retracts[{i}]",
                )
            seen.add(h)
        new_handles = list(range(self._next_handle, self._next_handle + len(values)))
        self._next_handle += len(values)
        for h, k in zip(new_handles, keys, strict=True):
            self._handles[h] = k
        removals = [(self._handles.pop(h), self._interests.pop(h, None)) for h in handles]

        def apply() -> None:
            for k, v in zip(keys, values, strict=True):
                self._index.add_assertion(k, v)
            for k, interest in removals:
                self._retract_now(k, interest)

        self._run(apply)
        return new_handles

    def count(self, value: Value) -> int:
        """How many copies of ``value`` are asserted now (0 if none)."""
        return self._index.count(checked_key(value))

    def __len__(self) -> int:
        """The number of live handles (assertions and observers)."""
        return len(self._handles)

    # -- internals --------------------------------------------------------------------------------

    def _retract_now(self, k: Key, interest: _Interest | None) -> None:
        if interest is not None:
            self._index.remove_handler(interest.skeleton, interest.observer)
        self._index.remove_assertion(k)

    def _run(self, action: Callable[..., None], *args: object) -> None:
        """Run ``action`` now, or after the current operation if called from a callback."""
        if self._busy:
            self._pending.append((action, args))
            return
        self._busy = True
        try:
            action(*args)
            if self._pending:
                self._drain()
        except BaseException:
            self._pending.clear()
            raise
        finally:
            self._busy = False

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            action, args = pending.popleft()
            action(*args)
