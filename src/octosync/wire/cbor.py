"""Canonical CBOR (RFC 8949 §4.2.1 core deterministic encoding), strict both ways.

Encoding: definite lengths, shortest integer heads, map keys sorted by their encoded bytes with
no duplicates, no tags, floats in the shortest width that round-trips (NaN and infinities as
half floats) and integral floats written as integers, as the WVP reference implementation does.

Decoding uses ``cbor2`` to parse, then re-encodes the result and demands the very same bytes:
the canonical form is unique, so anything else (indefinite lengths, long integer heads,
misordered or duplicate keys, tags, wide floats, trailing bytes) is a ``DecodeError``.
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

import cbor2

from octosync.errors import DecodeError

_U64_MAX = 2**64 - 1


def _head(major: int, n: int, out: bytearray) -> None:
    if n < 24:
        out.append((major << 5) | n)
    elif n <= 0xFF:
        out += bytes(((major << 5) | 24, n))
    elif n <= 0xFFFF:
        out.append((major << 5) | 25)
        out += n.to_bytes(2, "big")
    elif n <= 0xFFFF_FFFF:
        out.append((major << 5) | 26)
        out += n.to_bytes(4, "big")
    else:
        out.append((major << 5) | 27)
        out += n.to_bytes(8, "big")


def _int(n: int, out: bytearray, path: str) -> None:
    if n >= 0:
        if n > _U64_MAX:
            raise DecodeError(f"integer {n} does not fit 64 bits", path=path)
        _head(0, n, out)
    else:
        m = -1 - n
        if m > _U64_MAX:
            raise DecodeError(f"integer {n} does not fit 64 bits", path=path)
        _head(1, m, out)


def _float(f: float, out: bytearray, path: str) -> None:
    if math.isnan(f):
        out += b"\xf9\x7e\x00"
        return
    if math.isinf(f):
        out += b"\xf9\x7c\x00" if f > 0 else b"\xf9\xfc\x00"
        return
    if f.is_integer() and -(2**64) <= f <= _U64_MAX:
        _int(int(f), out, path)
        return
    try:
        half = struct.pack(">e", f)
        if struct.unpack(">e", half)[0] == f:
            out.append(0xF9)
            out += half
            return
    except OverflowError:
        pass
    single = struct.pack(">f", f) if abs(f) <= 3.4028234663852886e38 else None
    if single is not None and struct.unpack(">f", single)[0] == f:
        out.append(0xFA)
        out += single
        return
    out.append(0xFB)
    out += struct.pack(">d", f)


def _encode(value: Any, out: bytearray, path: str) -> None:
    if value is None:
        out.append(0xF6)
    elif value is True:
        out.append(0xF5)
    elif value is False:
        out.append(0xF4)
    elif isinstance(value, int):
        _int(value, out, path)
    elif isinstance(value, float):
        _float(value, out, path)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        _head(3, len(raw), out)
        out += raw
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        _head(2, len(raw), out)
        out += raw
    elif isinstance(value, list | tuple):
        _head(4, len(value), out)
        for i, item in enumerate(value):
            _encode(item, out, f"{path}[{i}]")
    elif isinstance(value, dict):
        entries: list[tuple[bytes, Any, Any]] = []
        for k, v in value.items():
            key_buf = bytearray()
            _encode(k, key_buf, f"{path}.<key>")
            entries.append((bytes(key_buf), k, v))
        entries.sort(key=lambda e: e[0])
        for a, b in itertools.pairwise(entries):
            if a[0] == b[0]:
                raise DecodeError(f"duplicate map key {a[1]!r}", path=path)
        _head(5, len(entries), out)
        for kb, k, v in entries:
            out += kb
            _encode(v, out, f"{path}.{k}")
    else:
        raise DecodeError(f"{type(value).__name__} has no canonical CBOR form", path=path)


def encode(value: Any) -> bytes:
    """Canonical CBOR bytes for plain data (None, bool, int, float, str, bytes, list, dict)."""
    out = bytearray()
    _encode(value, out, "$")
    return bytes(out)


def _no_tags(decoder: Any, tag: Any) -> Any:
    raise DecodeError(f"CBOR tag {tag.tag} is not allowed", path="$")


def decode(data: bytes) -> Any:
    """Plain data from canonical CBOR; anything non-canonical is a ``DecodeError``."""
    try:
        value = cbor2.loads(data, tag_hook=_no_tags)
    except DecodeError:
        raise
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise DecodeError(f"not valid CBOR: {exc}", path="$") from exc
    try:
        again = encode(value)
    except DecodeError as exc:
        raise DecodeError(f"not canonical CBOR: {exc.message}", path=exc.path) from exc
    if again != data:
        raise DecodeError("not canonical CBOR (RFC 8949 deterministic encoding)", path="$")
    return value
