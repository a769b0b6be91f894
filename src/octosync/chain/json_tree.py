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


def check_json(value: Any, path: str = "$", depth: int = 0) -> None:
    """Raise ``DecodeError`` naming the first place where ``value`` is not a JSON tree."""
    if depth > MAX_DEPTH:
        raise LimitExceeded(f"JSON tree nested deeper than {MAX_DEPTH}", path=path)
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT_MIN <= value <= INT_MAX:
            raise LimitExceeded(f"integer {value} is outside the signed 64-bit range", path=path)
        return
    if value is None or isinstance(value, bool | float | str):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise DecodeError(f"JSON object key {key!r} is not a string", path=path)
            check_json(item, f"{path}.{key}", depth + 1)
        return
    raise DecodeError(f"{type(value).__name__} is not a JSON value", path=path)


def merge_patch(target: JsonTree, patch: JsonTree) -> JsonTree:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces.

    Pure: ``target`` is not modified; only the objects on the patched paths are copied.
    """
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
