"""Whole numbers as JavaScript peers send them, checked by msgspec while it decodes.

A JavaScript number is a float64. TopGun's client (msgpackr) writes a whole number as a MsgPack
integer when it fits in 32 bits and as a float64 otherwise, so every millisecond timestamp it
sends is a float. A field holding a whole number therefore takes either form: its type is an
``int`` branch and a ``float`` branch under the same ``msgspec.Meta`` bounds, the float branch
also ``multiple_of=1``. msgspec refuses a fraction, NaN, an infinity, a bool, a string or a
value out of range while it decodes, naming the field, and nothing reads the value first.

The float that passed still has to become an ``int`` (a millis value is hashed and journaled
as its digits). :func:`int_coercions` finds a Struct's whole-number fields from their types, so
no list of names is kept by hand, and :func:`int_post_init` makes the ``__post_init__`` that
converts them, which ``crdt.sync_messages.TopGunStruct`` gives each class that has any. To mypy
these types are ``int``: what every decoded or constructed value holds.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Union, get_args, get_origin

import msgspec

from octosync.bounds import MAX_HLC_COUNTER, MAX_SAFE_INTEGER

MAX_HASH32: Final = 2**32 - 1


def whole(ge: int, le: int) -> Any:
    """The type of a whole number in ``[ge, le]`` sent as an integer or an integral float."""
    return Union[  # noqa: UP007 -- ``|`` between two ``Annotated`` forms is this same Union
        Annotated[int, msgspec.Meta(ge=ge, le=le)],
        Annotated[float, msgspec.Meta(ge=float(ge), le=float(le), multiple_of=1.0)],
    ]


if TYPE_CHECKING:
    JsUint = int
    JsCounter = int
    JsHash32 = int
else:
    JsUint = whole(0, MAX_SAFE_INTEGER)
    """A count, a size, a code or milliseconds: non-negative and exact in JavaScript."""
    JsCounter = whole(0, MAX_HLC_COUNTER)
    """An HLC counter, bounded as the journal's ``Timestamp`` bounds it."""
    JsHash32 = whole(0, MAX_HASH32)
    """A 32-bit Merkle hash (TopGun's FNV-1a)."""

Coerce = Callable[[Any], Any]
"""A container field's conversion: the value with its integral floats made ``int``."""


def _is_whole_float(tp: Any) -> bool:
    """The float branch :func:`whole` makes: ``Annotated[float, Meta(multiple_of=1)]``."""
    if get_origin(tp) is not Annotated or get_args(tp)[0] is not float:
        return False
    return any(isinstance(m, msgspec.Meta) and m.multiple_of == 1 for m in tp.__metadata__)


def _as_int(value: Any) -> Any:
    """A whole number's conversion: the float that passed its bounds becomes ``int``."""
    return int(value) if type(value) is float else value


def _coercion(tp: Any) -> Coerce | None:
    """:func:`_as_int` for a whole number (or an optional one), another :data:`Coerce` for a
    container of them, ``None`` for a type that holds none."""
    args = get_args(tp)
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        whole_number = any(_is_whole_float(a) for a in args)
        rest = [a for a in args if not _is_whole_float(a) and _coercion(a) is not None]
        if rest and (whole_number or len(rest) > 1):  # which conversion applies is the value's
            raise TypeError(f"{tp}: one kind of whole-number holder per field")
        return _as_int if whole_number else _coercion(rest[0]) if rest else None
    if origin is dict and len(args) == 2:
        each = _coercion(args[1])
        if each is None:
            return None
        return lambda d: (
            {k: each(v) for k, v in d.items()}
            if type(d) is dict and any(type(v) is not int for v in d.values())
            else d
        )
    if origin is list and len(args) == 1:
        item = _coercion(args[0])
        if item is None:
            return None
        return lambda xs: (
            [item(x) for x in xs]
            if type(xs) is list and any(type(x) is not int for x in xs)
            else xs
        )
    return None


class _Names(dict[str, Any]):
    """What an annotation's names mean: the module's, the builtins', else ``Any`` (a class
    declared further down, or the class itself). Such a name is never a whole-number type,
    which a module imports before any Struct names it."""

    def __init__(self, module: dict[str, Any]) -> None:
        super().__init__()
        self.module = module

    def __missing__(self, key: str) -> Any:
        if key in self.module:
            return self.module[key]
        return getattr(builtins, key, Any)


def int_coercions(cls: type) -> tuple[tuple[str, ...], tuple[tuple[str, Coerce], ...]]:
    """``cls``'s whole-number fields (inherited ones too): the plain or optional ones by name,
    and the containers of them (``dict[str, JsUint]``) with their conversion."""
    scalars: dict[str, None] = {}
    containers: dict[str, Coerce] = {}
    for klass in reversed(cls.__mro__):
        names = _Names(vars(sys.modules[klass.__module__]))
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            tp = eval(annotation, {}, names) if isinstance(annotation, str) else annotation
            if get_origin(tp) is ClassVar:
                continue
            found = _coercion(tp)
            if found is _as_int:
                scalars[name] = None
            elif found is not None:
                containers[name] = found
    return tuple(scalars), tuple(containers.items())


PostInit = Callable[[Any], None]


def int_post_init(cls: type, own: PostInit | None = None) -> PostInit | None:
    """A ``__post_init__`` for ``cls`` that makes its whole-number fields' floats ``int`` and
    then calls ``own``, or ``None`` when ``cls`` has no such field.

    Its source is generated with the field names spelled out, as ``dataclasses`` writes an
    ``__init__``: msgspec calls it for every Struct it decodes, two of them per TopGun op, and
    ``self.millis`` costs half of what ``getattr(self, name)`` in a loop does."""
    scalars, containers = int_coercions(cls)
    if not scalars and not containers:
        return None
    env: dict[str, Any] = {"force": msgspec.structs.force_setattr, "own": own}
    lines = ["def post_init(self):"]
    for name in scalars:
        assert name.isidentifier()
        lines += [
            f"    if type(self.{name}) is float:",
            f"        force(self, {name!r}, int(self.{name}))",
        ]
    for i, (name, coerce) in enumerate(containers):
        assert name.isidentifier()
        env[f"coerce_{i}"] = coerce
        lines += [
            f"    value = self.{name}",
            f"    fixed = coerce_{i}(value)",
            "    if fixed is not value:",
            f"        force(self, {name!r}, fixed)",
        ]
    if own is not None:
        lines.append("    own(self)")
    exec("\n".join(lines), env)
    post_init: PostInit = env["post_init"]
    return post_init
