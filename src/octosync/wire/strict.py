"""Turn msgspec's decode failures into ``DecodeError`` with the failing field as ``path``.

msgspec reports the location of a validation failure as a `` - at `$...` `` suffix of its
message; callers want it as data, so faces can put it in their error frames.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import msgspec

from octosync.errors import DecodeError, LimitExceeded

T = TypeVar("T")
Buffer = bytes | bytearray | memoryview

_AT = re.compile(r" - at `(?:key` in `)?(\$[^`]*)`$")
"""msgspec's location suffix; a bad map key reads `` - at `key` in `$.field` ``."""
_NAMED_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `([^`]*)`")


def decode_error(exc: msgspec.DecodeError | UnicodeDecodeError, *, dialect: str) -> DecodeError:
    """A ``DecodeError`` for ``exc``; ``path`` is a ``$``-rooted JSONPath-like field path."""
    if isinstance(exc, UnicodeDecodeError):
        # msgspec lets a bad UTF-8 sequence in a string escape as this, with no location.
        return DecodeError(f"{dialect}: a string is not valid UTF-8 ({exc.reason})", path="$")
    text = str(exc)
    found = _AT.search(text)
    path = found.group(1) if found else "$"
    message = text[: found.start()] if found else text
    named = _NAMED_FIELD.match(message)
    if named:
        path = f"{path}.{named.group(1)}"
    return DecodeError(f"{dialect}: {message}", path=path)


def too_deep(dialect: str) -> LimitExceeded:
    """The error for input nested deeper than the decoder's recursion limit."""
    return LimitExceeded(f"{dialect}: nesting deeper than the decoder allows", path="$")


def strict(decode: Callable[[Buffer], T], data: Buffer, *, dialect: str) -> T:
    """``decode(data)``, with msgspec's failures turned into ``DecodeError``."""
    try:
        return decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise decode_error(exc, dialect=dialect) from None
    except RecursionError:
        raise too_deep(dialect) from None
