"""Preserves values <-> dataspace values, and ``dataspacePatterns.prs`` -> dataspace patterns.

The relay keeps Preserves' data model in the dataspace: symbols stay :class:`Symbol` (never
equal to a string), sequences become lists, sets frozensets, embedded refs the relay's
:class:`Ref` objects (opaque to the index). Refs are translated by callbacks, so each
connection's membrane decides what a wire ref means.

Patterns: ``<_>`` is ``_``, ``<bind p>`` a capture, ``<lit v>`` the constant, and a
``<group <rec L> {i: p ...}>`` (or ``<arr>``) a record (list) whose arity is the highest
index mentioned plus one, unmentioned positions discarded; ``<group <dict> {k: p ...}>`` a
dict of those keys. Deviation from Syndicate: the index matches records, arrays and dicts of
exactly that arity (key set), where Syndicate also matches ones with extra fields.
syndicate-py always mentions the last field, so its patterns mean the same here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import preserves

from octosync.dataspace.values import Capture, Opaque, Record, Symbol, _, checked_key, key
from octosync.errors import InvalidPattern, InvalidValue

Value: TypeAlias = Any


class Ref(Opaque):
    """An entity reference inside the dataspace: the entity and the caveats that attenuate
    what is asserted or sent through it. Equal when both are (the index keys it that way)."""

    __slots__ = ("attenuation", "entity")

    def __init__(self, entity: object, attenuation: tuple[Value, ...] = ()) -> None:
        self.entity = entity
        self.attenuation = attenuation

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Ref
            and other.entity == self.entity
            and (
                other.attenuation is self.attenuation
                or key(list(other.attenuation)) == key(list(self.attenuation))
            )
        )

    def __hash__(self) -> int:
        return hash(self.entity)

    def __repr__(self) -> str:
        return f"Ref({self.entity!r}{', attenuated' if self.attenuation else ''})"


RefIn: TypeAlias = Callable[[Any], Ref]
"""Wire ref (as the codec decoded it) -> the local Ref."""
RefOut: TypeAlias = Callable[[Ref], Any]
"""Local Ref -> the wire ref to put in an ``Embedded``."""

_SYM = preserves.Symbol
_PREC = preserves.Record
_EMB = preserves.Embedded


def from_wire(v: Value, ref_in: RefIn, path: str = "$") -> Value:
    """The dataspace value of Preserves value ``v``."""
    t = type(v)
    if t is str or t is int or t is bytes or t is bool or t is float:
        return v
    if t is _SYM:
        return Symbol(v.name)
    if t is tuple or t is list:
        return [from_wire(x, ref_in, path) for x in v]
    if t is _PREC:
        label = from_wire(v.key, ref_in, path)
        return Record(label, *[from_wire(f, ref_in, path) for f in v.fields])
    if isinstance(v, dict):
        return {from_wire(k, ref_in, path): from_wire(x, ref_in, path) for k, x in v.items()}
    if t is frozenset:
        return frozenset(from_wire(x, ref_in, path) for x in v)
    if t is _EMB:
        return ref_in(v.embeddedValue)
    raise InvalidValue(f"unsupported Preserves value {t.__name__}", path=path)


def to_wire(v: Value, ref_out: RefOut) -> Value:
    """The Preserves value of dataspace value ``v``."""
    t = type(v)
    if t is str or t is int or t is bytes or t is bool or t is float:
        return v
    if t is Symbol:
        return _SYM(v.name)
    if t is list:
        return tuple([to_wire(x, ref_out) for x in v])
    if t is Record:
        return _PREC(to_wire(v.label, ref_out), [to_wire(f, ref_out) for f in v.fields])
    if t is dict:
        return preserves.ImmutableDict(
            (to_wire(k, ref_out), to_wire(x, ref_out)) for k, x in v.items()
        )
    if t is frozenset:
        return frozenset(to_wire(x, ref_out) for x in v)
    if t is Ref:
        return _EMB(ref_out(v))
    raise InvalidValue(f"cannot put a {t.__name__} on the wire")


OBSERVE = Symbol("Observe")
_DISCARD = Symbol("_")
_BIND = Symbol("bind")
_LIT = Symbol("lit")
_GROUP = Symbol("group")
_REC = Symbol("rec")
_ARR = Symbol("arr")
_DICT = Symbol("dict")
_ATOM_TYPES = (bool, float, int, str, bytes, Symbol, Ref)


def observe_parts(v: Value) -> tuple[Value, Ref] | None:
    """``(pattern, observer)`` when ``v`` is ``<Observe pattern #:observer>``."""
    if type(v) is Record and v.label == OBSERVE and len(v.fields) == 2:
        observer = v.fields[1]
        if type(observer) is Ref:
            return v.fields[0], observer
    return None


def pattern_of(p: Value, path: str = "pattern") -> Value:
    """The dataspace pattern of a ``dataspacePatterns.Pattern`` (already ``from_wire``)."""
    if type(p) is not Record or type(p.label) is not Symbol:
        raise InvalidPattern(
            "a pattern is <_>, <bind p>, <lit v> or <group type entries>", path=path
        )
    label, fields = p.label, p.fields
    if label == _DISCARD and not fields:
        return _
    if label == _BIND and len(fields) == 1:
        return Capture(pattern_of(fields[0], f"{path}.bind"))
    if label == _LIT and len(fields) == 1:
        if not isinstance(fields[0], _ATOM_TYPES):
            raise InvalidPattern("<lit> holds an atom or an embedded ref", path=f"{path}.lit")
        return fields[0]
    if label == _GROUP and len(fields) == 2 and type(fields[1]) is dict:
        return _group(fields[0], fields[1], path)
    raise InvalidPattern(f"unknown pattern {label.name}/{len(fields)}", path=path)


def _group(kind: Value, entries: dict[Value, Value], path: str) -> Value:
    subs = {k: pattern_of(x, f"{path}[{k!r}]") for k, x in entries.items()}
    if type(kind) is Record and kind.label == _DICT and not kind.fields:
        for k in subs:
            checked_key(k, f"{path}.key")
        return subs
    if type(kind) is Record and kind.label in (_REC, _ARR):
        if any(type(k) is not int or k < 0 for k in subs):
            raise InvalidPattern("record and array entries are keyed by index", path=path)
        items = [subs.get(i, _) for i in range(max(subs, default=-1) + 1)]
        if kind.label == _ARR and not kind.fields:
            return items
        if len(kind.fields) == 1:
            return Record(kind.fields[0], *items)
    raise InvalidPattern("a group type is <rec label>, <arr> or <dict>", path=f"{path}.type")
