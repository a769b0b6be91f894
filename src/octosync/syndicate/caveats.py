"""Attenuation caveats (``sturdy.prs``): what a ref lets through, and how it rewrites it.

A ref carries caveats; everything asserted or sent through it is run through them from the
newest (rightmost) to the oldest. ``<rewrite pattern template>`` matches and rebuilds,
``<or [rewrite ...]>`` takes the first alternative that matches, ``<reject pattern>`` drops
what matches, an unknown caveat drops everything. A value that does not survive is silently
dropped, as in Syndicate. Values here are dataspace values (``syndicate.values.from_wire``).
"""

from __future__ import annotations

from collections.abc import Sequence

from octosync.dataspace.values import Record, Symbol, values_equal
from octosync.syndicate.values import Ref, Value

_ = Symbol("_")
BIND, AND, NOT, LIT = Symbol("bind"), Symbol("and"), Symbol("not"), Symbol("lit")
REC, ARR, DICT = Symbol("rec"), Symbol("arr"), Symbol("dict")
REF, ATTENUATE = Symbol("ref"), Symbol("attenuate")
REWRITE, REJECT, OR = Symbol("rewrite"), Symbol("reject"), Symbol("or")
ATOM_TYPES: dict[Symbol, type] = {
    Symbol("Boolean"): bool,
    Symbol("Double"): float,
    Symbol("SignedInteger"): int,
    Symbol("String"): str,
    Symbol("ByteString"): bytes,
    Symbol("Symbol"): Symbol,
}
EMBEDDED = Symbol("Embedded")


def _is(v: Value, label: Symbol, arity: int) -> bool:
    return type(v) is Record and v.label == label and len(v.fields) == arity


def matches(p: Value, v: Value, bindings: list[Value]) -> bool:
    """Whether attenuation pattern ``p`` matches ``v``; captures go to ``bindings``."""
    if p == EMBEDDED:
        return type(v) is Ref
    atom = ATOM_TYPES.get(p) if type(p) is Symbol else None
    if atom is not None:
        return type(v) is atom
    if type(p) is not Record:
        return False
    f = p.fields
    if _is(p, _, 0):
        return True
    if _is(p, BIND, 1):
        bindings.append(v)
        return matches(f[0], v, bindings)
    if _is(p, AND, 1) and type(f[0]) is list:
        return all(matches(q, v, bindings) for q in f[0])
    if _is(p, NOT, 1):
        return not matches(f[0], v, [])
    if _is(p, LIT, 1):
        return values_equal(f[0], v)
    if _is(p, REC, 2) and type(f[1]) is list:
        return (
            type(v) is Record
            and values_equal(v.label, f[0])
            and len(v.fields) == len(f[1])
            and all(matches(q, x, bindings) for q, x in zip(f[1], v.fields, strict=True))
        )
    if _is(p, ARR, 1) and type(f[0]) is list:
        return (
            type(v) is list
            and len(v) == len(f[0])
            and all(matches(q, x, bindings) for q, x in zip(f[0], v, strict=True))
        )
    if _is(p, DICT, 1) and type(f[0]) is dict:
        if type(v) is not dict:
            return False
        for k, q in f[0].items():
            found = [x for kk, x in v.items() if values_equal(kk, k)]
            if not found or not matches(q, found[0], bindings):
                return False
        return True
    return False


def instantiate(t: Value, bindings: Sequence[Value]) -> Value | None:
    """Template ``t`` filled from ``bindings``; None if it refers to a missing binding."""
    if type(t) is not Record:
        return None
    f = t.fields
    if _is(t, REF, 1):
        n = f[0]
        return bindings[n] if type(n) is int and 0 <= n < len(bindings) else None
    if _is(t, LIT, 1):
        return f[0]
    if _is(t, ATTENUATE, 2) and type(f[1]) is list:
        inner = instantiate(f[0], bindings)
        if type(inner) is not Ref:
            return None
        return Ref(inner.entity, (*inner.attenuation, *f[1]))
    if _is(t, REC, 2) and type(f[1]) is list:
        fields = [instantiate(x, bindings) for x in f[1]]
        return None if any(x is None for x in fields) else Record(f[0], *fields)
    if _is(t, ARR, 1) and type(f[0]) is list:
        items = [instantiate(x, bindings) for x in f[0]]
        return None if any(x is None for x in items) else items
    if _is(t, DICT, 1) and type(f[0]) is dict:
        entries = {k: instantiate(x, bindings) for k, x in f[0].items()}
        return None if any(x is None for x in entries.values()) else entries
    return None


def _rewrite(caveat: Value, v: Value) -> Value | None:
    if _is(caveat, REWRITE, 2):
        bindings: list[Value] = []
        return (
            instantiate(caveat.fields[1], bindings)
            if matches(caveat.fields[0], v, bindings)
            else None
        )
    return None


def apply_caveat(caveat: Value, v: Value) -> Value | None:
    """``v`` after one caveat, or None if the caveat drops it."""
    if _is(caveat, REWRITE, 2):
        return _rewrite(caveat, v)
    if _is(caveat, REJECT, 1):
        return None if matches(caveat.fields[0], v, []) else v
    if _is(caveat, OR, 1) and type(caveat.fields[0]) is list:
        for alternative in caveat.fields[0]:
            out = _rewrite(alternative, v)
            if out is not None:
                return out
        return None
    return None


def attenuate(caveats: Sequence[Value], v: Value) -> Value | None:
    """``v`` through every caveat, newest (rightmost) first; None when one drops it."""
    for caveat in reversed(caveats):
        out = apply_caveat(caveat, v)
        if out is None:
            return None
        v = out
    return v
