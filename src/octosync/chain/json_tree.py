"""JSON trees for chain state: a strict shape check and RFC 7386 merge patch.

State travels as MsgPack and JSON, and MsgPack can carry things JSON cannot (binary, extension
types, non-string map keys). The chain's state is a JSON tree in both, so anything decoded
is checked here once; after that the merge patch can assume plain dicts, lists and scalars.
"""

from __future__ import annotations

from typing import Any

from octosync.errors import DecodeError, LimitExceeded

JsonTree = Any
"""``None | bool | int | float | str | list[JsonTree] | dict[str, JsonTree]``."""

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""What both MsgPack and every JSON peer this side talks to can carry as an integer."""


class _Invalid(Exception):
    """Raised deep in the walk; each level adds its key on the way out, so the path is only
    built when something is wrong (the walk runs on every state update a device receives)."""

    def __init__(self, error: type[DecodeError | LimitExceeded], message: str) -> None:
        self.error = error
        self.message = message
        self.parts: list[str] = []


def check_json(value: Any, path: str = "$", depth: int = 0) -> None:
    """Raise ``DecodeError`` naming the first place where ``value`` is not a JSON tree."""
    try:
        _walk(value, depth)
    except _Invalid as bad:
        raise bad.error(bad.message, path=path + "".join(reversed(bad.parts))) from None


def _walk(value: Any, depth: int) -> None:
    kind = type(value)
    if kind is dict or kind is list:
        if depth >= MAX_DEPTH:
            raise _Invalid(LimitExceeded, f"JSON tree nested deeper than {MAX_DEPTH}")
        is_dict = kind is dict
        pairs = value.items() if is_dict else enumerate(value)
        for key, item in pairs:
            if is_dict and type(key) is not str:
                raise _Invalid(DecodeError, f"JSON object key {key!r} is not a string")
            # Scalars inline: this loop runs over every node of every state update received.
            item_kind = type(item)
            if item_kind is str or item_kind is float or item_kind is bool or item is None:
                continue
            if item_kind is int and INT_MIN <= item <= INT_MAX:
                continue
            try:
                _walk(item, depth + 1)
            except _Invalid as bad:
                bad.parts.append(f".{key}" if is_dict else f"[{key}]")
                raise
    elif not _scalar(value):
        if kind is int:
            raise _Invalid(LimitExceeded, f"integer {value} is outside the signed 64-bit range")
        raise _Invalid(DecodeError, f"{kind.__name__} is not a JSON value")


def _scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is float or kind is bool or value is None:
        return True
    return kind is int and INT_MIN <= value <= INT_MAX


def merge_patch(target: JsonTree, patch: JsonTree) -> JsonTree:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces.

    Pure: ``target`` is not modified; only the objects on the patched paths are copied.
    """
    if type(patch) is not dict:
        return patch
    result = dict(target) if type(target) is dict else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif type(value) is dict:
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = value
    return result
