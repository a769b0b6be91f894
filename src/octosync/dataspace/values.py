"""Dataspace values and their type-respecting keys.

Python conflates ``1``, ``1.0`` and ``True`` (equal, same hash), so a plain dict would merge
them. Every table in the index is therefore keyed by :func:`key`, which maps a value to a
hashable object that is equal to another value's key exactly when the two values are equal
*and of the same types all the way down*. Strings, ints, bytes and ``None`` are their own keys
(the common case costs one type check); the rest are wrapped with a private tag.

Values are atoms (``str``, ``int``, ``float``, ``bool``, ``bytes``, ``None``, :class:`Symbol`,
and :class:`Opaque` objects such as a relay's entity references), records (:class:`Record`),
lists, dicts (keys are atoms or records) and frozensets (Preserves sets, matched only as
constants). Pattern operators
(:data:`_`, :func:`capture`) are values too, so an ``Observe(pattern)`` can itself be asserted.
Values must not be mutated once asserted (like dict keys).
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from octosync.errors import InvalidValue

Value: TypeAlias = Any
"""Anything :func:`key` accepts; kept as ``Any`` because values nest arbitrarily."""

Key: TypeAlias = object
Class: TypeAlias = tuple[object, object]
"""A constructor class: ``(label key, arity)``, ``(SEQ, length)`` or ``(DICT, key set)``."""


class _Tag:
    """A unique marker inside keys; equal only to itself, so tagged keys never collide."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"<{self._name}>"


_TRUE: Final = _Tag("true")
_FALSE: Final = _Tag("false")
_FLOAT: Final = _Tag("float")
_NAN: Final = _Tag("nan")
_RECORD: Final = _Tag("record")
SEQ: Final = _Tag("seq")
DICT: Final = _Tag("dict")
_CAPTURE: Final = _Tag("capture")
_DISCARD: Final = _Tag("discard")
_SYMBOL: Final = _Tag("symbol")
_SET: Final = _Tag("set")
_OPAQUE: Final = _Tag("opaque")


class Symbol:
    """A Preserves symbol: a name distinct from the string with the same characters."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Symbol and other.name == self.name

    def __hash__(self) -> int:
        return hash((_SYMBOL, self.name))

    def __repr__(self) -> str:
        return f"Symbol({self.name!r})"


class Opaque:
    """Base of values the dataspace holds but never looks into (entity references): equal
    only to themselves, so the index keys them by identity."""

    __slots__ = ()


_ATOMS: Final = (str, int, float, bool, bytes, type(None), Symbol)
PLAIN: Final = frozenset({str, int, bytes, type(None)})
"""Types whose values are their own keys (Python never conflates them with another type)."""


class Record:
    """``label(field, ...)``: the labelled tuple every assertion is built from.

    Its class (label, arity) is computed once at construction because the index reads it at
    every trie edge; its key is computed on first use and cached.
    """

    __slots__ = ("_class", "_key", "fields", "label")

    label: Value
    fields: tuple[Value, ...]
    _class: Class
    _key: tuple[object, ...] | None

    def __init__(self, label: Value, *fields: Value) -> None:
        if type(label) not in _ATOMS:
            raise InvalidValue(
                f"a record label must be an atom, got {type(label).__name__}", path="label"
            )
        self.label = label
        self.fields = fields
        self._class = (key(label), len(fields))
        self._key = None

    def compute_key(self) -> tuple[object, ...]:
        """Build and cache the key (fields are checked here, on first use)."""
        fields = self.fields
        if PLAIN.issuperset(map(type, fields)):  # every field is its own key: no calls
            k = (_RECORD, self._class[0], *fields)
        else:
            k = (_RECORD, self._class[0], *map(key, fields))
        self._key = k
        return k

    def __eq__(self, other: object) -> bool:
        return type(other) is Record and key(self) == key(other)

    def __hash__(self) -> int:
        return hash(key(self))

    def __repr__(self) -> str:
        inner = ", ".join(repr(f) for f in (self.label, *self.fields))
        return f"Record({inner})"


class Discard:
    """The "don't care" pattern operator; use the singleton :data:`_`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "_"


_ = Discard()
"""Matches anything and captures nothing."""


class Capture:
    """Captures the value at its position if it also matches ``sub``."""

    __slots__ = ("sub",)

    def __init__(self, sub: Value) -> None:
        self.sub = sub

    def __eq__(self, other: object) -> bool:
        return type(other) is Capture and key(self) == key(other)

    def __hash__(self) -> int:
        return hash(key(self))

    def __repr__(self) -> str:
        return "capture()" if type(self.sub) is Discard else f"capture({self.sub!r})"


def capture(sub: Value = _) -> Capture:
    """A capturing position; ``capture()`` is ``capture(_)`` and captures anything."""
    return Capture(sub)


OBSERVE_LABEL: Final = "Observe"


def Observe(pattern: Value) -> Record:  # noqa: N802 - reads as a constructor, like Record
    """The assertion of interest in ``pattern``: ``Record("Observe", pattern)``."""
    return Record(OBSERVE_LABEL, pattern)


def key(v: Value) -> Key:
    """The type-respecting hashable key of ``v``; raises :class:`InvalidValue` if unsupported."""
    t = type(v)
    if t is str or t is int or v is None or t is bytes:
        return v
    if t is Record:
        k = v._key
        if k is None:  # first use: the common all-plain case is built inline (hot path)
            fields = v.fields
            if PLAIN.issuperset(map(type, fields)):
                k = v._key = (_RECORD, v._class[0], *fields)
            else:
                k = v.compute_key()
        return k
    return _wrapped_key(v, t)


def _wrapped_key(v: Value, t: type) -> Key:
    if t is bool:
        return _TRUE if v else _FALSE
    if t is float:
        return (_FLOAT, _NAN if v != v else v)
    if t is list:
        return (SEQ, *map(key, v))
    if t is dict:
        return (DICT, frozenset([(key(k), key(x)) for k, x in v.items()]))
    if t is Capture:
        return (_CAPTURE, key(v.sub))
    if t is Discard:
        return _DISCARD
    if t is Symbol:
        return (_SYMBOL, v.name)
    if t is frozenset:
        return (_SET, frozenset(map(key, v)))
    if isinstance(v, Opaque):
        return (_OPAQUE, v)
    raise InvalidValue(f"unsupported value type {t.__name__}")


def classof(v: Value) -> Class | None:
    """The constructor class of ``v``, or ``None`` for atoms and operators (seed: ``classof``)."""
    t = type(v)
    if t is Record:
        c: Class = v._class
        return c
    if t is list:
        return (SEQ, len(v))
    if t is dict:
        return (DICT, frozenset(map(key, v)))
    return None


def locate_invalid(v: Value, path: str = "$") -> InvalidValue | None:
    """The error for the first unsupported part of ``v``, with its path (slow; error path only)."""
    t = type(v)
    if t in _ATOMS or t is Discard or isinstance(v, Opaque):
        return None
    if t is Record:
        children: list[tuple[str, Value]] = [
            (f"{path}.fields[{i}]", f) for i, f in enumerate(v.fields)
        ]
    elif t is Capture:
        children = [(f"{path}.sub", v.sub)]
    elif t is list:
        children = [(f"{path}[{i}]", x) for i, x in enumerate(v)]
    elif t is frozenset:
        children = [(f"{path}.<member {i}>", x) for i, x in enumerate(v)]
    elif t is dict:
        children = []
        for k, x in v.items():
            children += [(f"{path}.<key {k!r}>", k), (f"{path}[{k!r}]", x)]
    else:
        return InvalidValue(f"unsupported value type {t.__name__}", path=path)
    for child_path, child in children:
        err = locate_invalid(child, child_path)
        if err is not None:
            return err
    return None


def checked_key(v: Value, path: str = "$") -> Key:
    """:func:`key`, but an unsupported part raises an error naming its path."""
    try:
        return key(v)
    except InvalidValue:
        err = locate_invalid(v, path)
        raise (err or InvalidValue("unsupported value", path=path)) from None
    except TypeError:  # an unhashable thing (e.g. a list) used inside a dict key position
        raise InvalidValue("value contains an unhashable dict key", path=path) from None


def values_equal(a: Value, b: Value) -> bool:
    """Structural, type-respecting equality written independently of :func:`key` (the oracle)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is float:
        return bool(a == b or (a != a and b != b))
    if ta is Record:
        return (
            values_equal(a.label, b.label)
            and len(a.fields) == len(b.fields)
            and all(values_equal(x, y) for x, y in zip(a.fields, b.fields, strict=True))
        )
    if ta is list:
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta is dict:
        if len(a) != len(b):
            return False
        for ka, va in a.items():
            partner = [kb for kb in b if values_equal(ka, kb)]
            if not partner or not values_equal(va, b[partner[0]]):
                return False
        return True
    if ta is Capture:
        return values_equal(a.sub, b.sub)
    if ta is frozenset:
        return len(a) == len(b) and all(any(values_equal(x, y) for y in b) for x in a)
    if isinstance(a, Opaque):
        return a is b
    return bool(a == b)
