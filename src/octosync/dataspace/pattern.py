"""Static analysis of a pattern into its skeleton: shape, constant map and capture map.

Follows the seed's ``shape``, ``constantmap`` and ``capturemap``. A sub-pattern with no
operator inside (no ``_``, no ``capture``) is a constant, whatever its structure; constructors
only become shape when something inside them is a pattern. Paths are tuples of steps
``(kind, index)``: the kind says how to step (record field, list item, dict entry) so that
projections can be compiled into straight-line code once per skeleton instead of being
interpreted on every event.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Final, NamedTuple, TypeAlias

from octosync.dataspace.values import (
    DICT,
    PLAIN,
    SEQ,
    Capture,
    Class,
    Discard,
    Key,
    Record,
    Value,
    checked_key,
    key,
)
from octosync.errors import InvalidPattern

FIELD: Final = 0
ITEM: Final = 1
ENTRY: Final = 2

Step: TypeAlias = tuple[int, Value]
Path: TypeAlias = tuple[Step, ...]
Paths: TypeAlias = tuple[Path, ...]


class Shape(NamedTuple):
    """A statically known constructor and the shapes of its children (``None`` is ``*``)."""

    cls: Class
    children: tuple[tuple[Step, Shape | None], ...]


class Skeleton(NamedTuple):
    """What the index needs to know about a pattern (seed: ``S x [HxV] x [H]``)."""

    shape: Shape | None
    const_paths: Paths
    const_key: tuple[Key, ...]
    capture_paths: Paths


def has_operator(p: Value) -> bool:
    """Whether ``p`` contains ``_`` or ``capture`` anywhere (otherwise it is a constant)."""
    t = type(p)
    if t is Discard or t is Capture:
        return True
    if t is Record:
        return any(has_operator(f) for f in p.fields)
    if t is list:
        return any(has_operator(x) for x in p)
    if t is dict:
        return any(has_operator(k) or has_operator(x) for k, x in p.items())
    return False


def analyse(pattern: Value) -> Skeleton:
    """The skeleton of ``pattern``; bad parts raise typed errors naming their path."""
    checked_key(pattern, "pattern")
    consts: list[tuple[Path, Value]] = []
    captures: list[Path] = []
    shape = _walk(pattern, (), "pattern", consts, captures)
    return Skeleton(
        shape,
        tuple(p for p, _v in consts),
        tuple(key(v) for _p, v in consts),
        tuple(captures),
    )


def _walk(
    p: Value, path: Path, where: str, consts: list[tuple[Path, Value]], captures: list[Path]
) -> Shape | None:
    t = type(p)
    if t is Discard:
        return None
    if t is Capture:
        captures.append(path)
        return _walk(p.sub, path, f"{where}.sub", consts, captures)
    if not has_operator(p):
        consts.append((path, p))
        return None
    if t is Record:
        kids = [
            ((FIELD, i), _walk(f, (*path, (FIELD, i)), f"{where}.fields[{i}]", consts, captures))
            for i, f in enumerate(p.fields)
        ]
        return Shape(p._class, tuple(kids))
    if t is list:
        kids = [
            ((ITEM, i), _walk(x, (*path, (ITEM, i)), f"{where}[{i}]", consts, captures))
            for i, x in enumerate(p)
        ]
        return Shape((SEQ, len(p)), tuple(kids))
    # a dict with an operator somewhere
    kids = []
    for k, x in p.items():
        if has_operator(k):
            raise InvalidPattern("a dict key in a pattern must be a constant", path=where)
        if type(k) is float and k != k:
            raise InvalidPattern("NaN cannot be a dict key in a pattern", path=where)
        kids.append(
            ((ENTRY, k), _walk(x, (*path, (ENTRY, k)), f"{where}[{k!r}]", consts, captures))
        )
    return Shape((DICT, frozenset(map(key, p))), tuple(kids))


def project(v: Value, path: Path) -> Value:
    """The sub-value of ``v`` at ``path`` (seed: ``project``); the shape was checked first."""
    for kind, index in path:
        v = v.fields[index] if kind == FIELD else v[index]
    return v


# Projections are compiled to straight-line code. Only integers (through ``int()``) and
# generated names are written into the source; dict keys travel in the namespace, so no
# user data is ever parsed as code. The caches may hand a pattern keyed by ``True`` the code
# compiled for ``1``: harmless, because a value reaches a projection only after its dict's
# exact (type-respecting) key set has been checked, and such a dict holds just one of them.


def _expression(path: Path, consts: dict[str, Value]) -> str:
    code = "v"
    for kind, index in path:
        if kind == FIELD:
            code += f".fields[{int(index)}]"
        elif kind == ITEM:
            code += f"[{int(index)}]"
        else:
            name = f"_e{len(consts)}"
            consts[name] = index
            code += f"[{name}]"
    return code


@lru_cache(maxsize=4096)
def constant_projector(paths: Paths) -> Callable[[Value], tuple[Key, ...]]:
    """``v -> (key(project v h) for h in paths)``, compiled once per constant map."""
    names: dict[str, Value] = {"_key": key, "_plain": PLAIN}
    lines = ["def project(v):"]
    for i, p in enumerate(paths):
        lines.append(f"    c{i} = {_expression(p, names)}")
        lines.append(f"    k{i} = c{i} if type(c{i}) in _plain else _key(c{i})")
    keys = "".join(f"k{i}," for i in range(len(paths)))
    lines.append(f"    return ({keys})")
    exec("\n".join(lines), names)
    fn: Callable[[Value], tuple[Key, ...]] = names["project"]
    return fn


@lru_cache(maxsize=4096)
def capture_projector(
    paths: Paths,
) -> Callable[[Value], tuple[tuple[Value, ...], tuple[Key, ...]]]:
    """``v -> (captures, their keys)``, compiled; the keys tuple is the captures tuple itself
    when every capture is its own key (strings, ints, ...), saving an allocation."""
    if not paths:
        return lambda v: ((), ())
    names: dict[str, Value] = {"_key": key, "_plain": PLAIN}
    lines = ["def project(v):"]
    for i, p in enumerate(paths):
        lines.append(f"    c{i} = {_expression(p, names)}")
        lines.append(f"    k{i} = c{i} if type(c{i}) in _plain else _key(c{i})")
    caps = ", ".join(f"c{i}" for i in range(len(paths))) + ","
    keys = ", ".join(f"k{i}" for i in range(len(paths))) + ","
    same = " and ".join(f"k{i} is c{i}" for i in range(len(paths)))
    lines.append(f"    caps = ({caps})")
    lines.append(f"    return (caps, caps) if {same} else (caps, ({keys}))")
    exec("\n".join(lines), names)
    fn: Callable[[Value], tuple[tuple[Value, ...], tuple[Key, ...]]] = names["project"]
    return fn
