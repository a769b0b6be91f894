"""Turn msgspec's decode failures into ``DecodeError`` with the failing field as ``path``.

msgspec reports the location of a validation failure as a `` - at `$...` `` suffix of its
message; callers want it as data, so faces can put it in their error frames.
"""

from __future__ import annotations

import re

import msgspec

from octosync.errors import DecodeError

_AT = re.compile(r" - at `(\$[^`]*)`$")
_NAMED_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `([^`]*)`")


def decode_error(exc: msgspec.DecodeError, *, dialect: str) -> DecodeError:
    """A ``DecodeError`` for ``exc``; ``path`` is a ``$``-rooted JSONPath-like field path."""
    text = str(exc)
    found = _AT.search(text)
    path = found.group(1) if found else "$"
    message = text[: found.start()] if found else text
    named = _NAMED_FIELD.match(message)
    if named:
        path = f"{path}.{named.group(1)}"
    return DecodeError(f"{dialect}: {message}", path=path)
