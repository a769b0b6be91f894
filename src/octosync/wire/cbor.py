"""Canonical CBOR (RFC 8949 §4.2.1 core deterministic encoding), strict both ways.

Encoding: definite lengths, shortest integer heads, map keys sorted by their encoded bytes with
no duplicates, no tags, floats in the shortest width that round-trips (NaN and infinities as
half floats) and integral floats written as integers, as the WVP reference implementation does.

Decoding first walks the bytes and checks every canonical rule (indefinite lengths, long
integer heads, misordered or duplicate keys, tags, wide or integral floats, bad UTF-8, trailing
bytes are a ``DecodeError``; nesting past ``MAX_DEPTH`` is ``LimitExceeded``), then lets
``cbor2`` build the values. Opaque fields (``raw_keys``) are validated but kept as ``Raw``
bytes, so a large producer-owned graph costs a walk, never a tree of Python objects.
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

import cbor2

from octosync.errors import DecodeError, LimitExceeded

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
    elif isinstance(value, Raw):
        out += value
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


class Raw(bytes):
    """One canonical CBOR item kept as its encoded bytes (validated, never turned into objects).

    WVP graphs and ops are the producer's own data: the server validates them and passes them
    on; ``encode`` splices a ``Raw`` verbatim, so a large graph is never rebuilt in Python.
    """

    def value(self) -> Any:
        """The item as plain data (a client that wants to read it)."""
        return decode(bytes(self))


MAX_DEPTH = 256
"""Deepest nesting accepted (arrays and maps); deeper input is ``LimitExceeded``."""


def _float_canonical(data: bytes, pos: int, info: int) -> int:
    """Check a float item at ``pos`` (after its initial byte); returns its end."""
    size = {25: 2, 26: 4, 27: 8}[info]
    end = pos + size
    if end > len(data):
        raise DecodeError("not valid CBOR: truncated float", path="$")
    raw = data[pos:end]
    f = struct.unpack({2: ">e", 4: ">f", 8: ">d"}[size], raw)[0]
    expected = bytearray()
    _float(f, expected, "$")
    if bytes(expected) != data[pos - 1 : end]:
        raise DecodeError("not canonical CBOR: a float is not in its shortest form", path="$")
    return end


def _read_head(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """``(major, info, argument, end of head)`` of the item at ``pos``, canonical heads only."""
    if pos >= len(data):
        raise DecodeError("not valid CBOR: premature end of input", path="$")
    initial = data[pos]
    major, info = initial >> 5, initial & 0x1F
    pos += 1
    if info < 24:
        return major, info, info, pos
    if info > 27:
        raise DecodeError("not canonical CBOR: indefinite length or reserved head", path="$")
    if major == 7:
        return major, info, 0, pos
    width = 1 << (info - 24)
    if pos + width > len(data):
        raise DecodeError("not valid CBOR: truncated head", path="$")
    arg = int.from_bytes(data[pos : pos + width], "big")
    if arg < (24 if width == 1 else 1 << (4 * width)):
        raise DecodeError("not canonical CBOR: a head is longer than needed", path="$")
    return major, info, arg, pos + width


def _item(
    data: bytes,
    pos: int,
    depth: int,
    raw_keys: frozenset[bytes],
    ranges: list[tuple[int, int]],
    in_raw: bool,
) -> int:
    """Validate the canonical item at ``pos``; returns where it ends."""
    major, info, arg, pos = _read_head(data, pos)
    if major <= 1:
        return pos
    if major <= 3:
        end = pos + arg
        if end > len(data):
            raise DecodeError("not valid CBOR: truncated string", path="$")
        if major == 3:
            try:
                data[pos:end].decode("utf-8")
            except UnicodeDecodeError:
                raise DecodeError("a text string is not valid UTF-8", path="$") from None
        return end
    if major == 6:
        raise DecodeError("CBOR tags are not allowed", path="$")
    if major == 7:
        if info in (20, 21, 22):
            return pos
        if info in (25, 26, 27):
            return _float_canonical(data, pos, info)
        raise DecodeError("not canonical CBOR: unsupported simple value", path="$")
    if depth >= MAX_DEPTH:
        raise LimitExceeded(f"CBOR nests deeper than {MAX_DEPTH}", path="$")
    depth += 1
    if major == 4:
        for _ in range(arg):
            pos = _item(data, pos, depth, raw_keys, ranges, in_raw)
        return pos
    previous = b""
    for i in range(arg):
        key_start = pos
        if pos < len(data) and data[pos] >> 5 in (4, 5):
            raise DecodeError("map keys must be scalars", path="$")
        pos = _item(data, pos, depth, raw_keys, ranges, in_raw)
        key = data[key_start:pos]
        if i and previous >= key:
            raise DecodeError("not canonical CBOR: map keys out of order or repeated", path="$")
        previous = key
        raw = not in_raw and key in raw_keys
        value_start = pos
        pos = _item(data, pos, depth, raw_keys, ranges, in_raw or raw)
        if raw:
            ranges.append((value_start, pos))
    return pos


def _validate(data: bytes, raw_keys: frozenset[bytes]) -> list[tuple[int, int]]:
    """Check that ``data`` is exactly one canonical item; the ranges of its raw-kept values.

    Pure Python over the bytes, building nothing: a worker thread running it lets the event
    loop's thread in at every switch interval (a C decoder would hold the GIL throughout).
    """
    ranges: list[tuple[int, int]] = []
    end = _item(data, 0, 0, raw_keys, ranges, False)
    if end != len(data):
        raise DecodeError("not canonical CBOR: trailing bytes", path="$")
    return ranges


_PLACEHOLDER = b"\xf7"
"""``undefined``: never valid input, so it can stand in for a raw-kept value."""


def _restore(value: Any, raws: list[Raw]) -> Any:
    """Put the raw-kept values back where the placeholders stand (document order)."""
    if value is cbor2.undefined:
        return raws.pop(0)
    if isinstance(value, list):
        return [_restore(v, raws) for v in value]
    if isinstance(value, dict):
        return {k: _restore(v, raws) for k, v in value.items()}
    return value


def _no_tags(decoder: Any, tag: Any) -> Any:
    raise DecodeError(f"CBOR tag {tag.tag} is not allowed", path="$")


def decode(
    data: bytes, *, raw_keys: frozenset[str] = frozenset(), max_cooked: int | None = None
) -> Any:
    """Plain data from canonical CBOR; anything non-canonical is a ``DecodeError``.

    Values of map entries named in ``raw_keys`` come back as ``Raw`` (validated, not built);
    ``max_cooked`` bounds the bytes that are built into objects (``LimitExceeded`` beyond).
    """
    try:
        ranges = _validate(data, frozenset(encode(k) for k in raw_keys))
    except RecursionError:
        raise LimitExceeded("CBOR nests too deep", path="$") from None
    raws: list[Raw] = []
    cooked = data
    if ranges:
        parts = []
        at = 0
        for start, end in ranges:
            parts += [data[at:start], _PLACEHOLDER]
            raws.append(Raw(data[start:end]))
            at = end
        parts.append(data[at:])
        cooked = b"".join(parts)
    if max_cooked is not None and len(cooked) > max_cooked:
        raise LimitExceeded(
            f"{len(cooked)} bytes outside the opaque fields exceed {max_cooked}", path="$"
        )
    try:
        value = cbor2.loads(cooked, tag_hook=_no_tags)
    except DecodeError:
        raise
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise DecodeError(f"not valid CBOR: {exc}", path="$") from exc
    return _restore(value, raws) if raws else value
