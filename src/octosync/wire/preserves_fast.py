"""Preserves binary, fast: the bytes and values of the ``preserves`` package, with less work.

The dataspace face reads and writes every packet through Preserves binary, and the package's
codec walks each value through a chain of method calls and ``isinstance`` tests per byte. This
module does the same work with one type dispatch per value and slices instead of byte-by-byte
reads. It is held to the package exactly (a hypothesis test compares bytes and values):

- ``encode`` writes what ``preserves.binary.Encoder(encode_embedded=...)`` writes
  (non-canonical: sets and dictionaries in iteration order, annotations kept); values of a type
  it does not know (``__preserve__`` objects, annotated values, subclasses) go through the
  package's own encoder, into the same buffer;
- ``decode_from`` reads what ``preserves.binary.Decoder(decode_embedded=...)`` reads
  (annotations dropped), returning ``None`` for an incomplete value as ``try_next`` does, and
  raising the package's ``DecodeError`` where it would.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from preserves import Embedded, ImmutableDict, Record, Symbol
from preserves.binary import Encoder
from preserves.error import DecodeError as PreservesDecodeError

Value = Any
_DOUBLE = struct.Struct(">d")


# --- encoding ---------------------------------------------------------------------------------


def _varint(n: int, out: bytearray) -> None:
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _encode_into(v: Value, out: bytearray, emb: Callable[[Any], Value]) -> None:
    t = type(v)
    if t is Record:
        out.append(0xB4)
        _encode_into(v.key, out, emb)
        for f in v.fields:
            _encode_into(f, out, emb)
        out.append(0x84)
    elif t is tuple or t is list:
        out.append(0xB5)
        for item in v:
            _encode_into(item, out, emb)
        out.append(0x84)
    elif t is int:
        out.append(0xB0)
        if v == 0:
            out.append(0)
        else:
            n = ((~v if v < 0 else v).bit_length() + 8) >> 3
            _varint(n, out)
            out += v.to_bytes(n, "big", signed=True)
    elif t is Symbol:
        bs = v.name.encode()
        out.append(0xB3)
        _varint(len(bs), out)
        out += bs
    elif t is str:
        bs = v.encode()
        out.append(0xB1)
        _varint(len(bs), out)
        out += bs
    elif t is bytes:
        out.append(0xB2)
        _varint(len(v), out)
        out += v
    elif t is bool:
        out.append(0x81 if v else 0x80)
    elif t is Embedded:
        out.append(0x86)
        _encode_into(emb(v.embeddedValue), out, emb)
    elif t is float:
        out.append(0x87)
        out.append(8)
        out += _DOUBLE.pack(v)
    else:
        fallback = Encoder(encode_embedded=emb)
        fallback.buffer = out  # the package's encoder, writing into the same buffer
        fallback.append(v)


def encode(v: Value, encode_embedded: Callable[[Any], Value] = lambda x: x) -> bytes:
    out = bytearray()
    _encode_into(v, out, encode_embedded)
    return bytes(out)


# --- decoding ---------------------------------------------------------------------------------


class _Short(Exception):
    """The value continues past the end of the buffer."""


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    result = 0
    shift = 0
    n = len(data)
    while True:
        if i >= n:
            raise _Short
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 128:
            return result, i
        shift += 7


def _take(data: bytes, i: int) -> tuple[bytes, int]:
    if i >= len(data):
        raise _Short
    length = data[i]
    if length < 128:  # nearly every length on this face: one byte
        i += 1
    else:
        length, i = _read_varint(data, i)
    end = i + length
    if end > len(data):
        raise _Short
    return data[i:end], end


_SYMBOLS: dict[bytes, Symbol] = {}
_SYMBOLS_MAX = 4096
"""Decoded symbols by their bytes: a face sees the same few labels in every packet. Bounded,
so a peer that sends many distinct symbols only stops the caching."""


def _symbol(raw: bytes) -> Symbol:
    sym = _SYMBOLS.get(raw)
    if sym is None:
        sym = Symbol(raw.decode("utf-8"))
        if len(_SYMBOLS) < _SYMBOLS_MAX:
            _SYMBOLS[raw] = sym
    return sym


def _items(data: bytes, i: int, emb: Callable[[Any], Any]) -> tuple[list[Value], int]:
    """A record's or sequence's values up to its end marker (``i`` after the marker). The
    atoms a turn is made of (short symbols, integers and strings, doubles) are read here
    rather than through a call each."""
    items: list[Value] = []
    append = items.append
    n = len(data)
    while True:
        if i >= n:
            raise _Short
        tag = data[i]
        if tag == 0x84:
            return items, i + 1
        if (tag == 0xB3 or tag == 0xB0 or tag == 0xB1) and i + 1 < n and data[i + 1] < 128:
            end = i + 2 + data[i + 1]
            if end > n:
                raise _Short
            raw = data[i + 2 : end]
            if tag == 0xB3:
                append(_symbol(raw))
            elif tag == 0xB0:
                append(int.from_bytes(raw, "big", signed=True))
            else:
                append(raw.decode("utf-8"))
            i = end
        elif tag == 0x87 and i + 1 < n and data[i + 1] == 8:
            end = i + 10
            if end > n:
                raise _Short
            append(_DOUBLE.unpack_from(data, i + 2)[0])
            i = end
        else:
            v, i = _decode(data, i, emb)
            append(v)


def _decode(data: bytes, i: int, emb: Callable[[Any], Any]) -> tuple[Value, int]:
    try:
        tag = data[i]
    except IndexError:
        raise _Short from None
    i += 1
    if tag == 0xB4 or tag == 0xB5:
        items, i = _items(data, i, emb)
        if tag == 0xB5:
            return tuple(items), i
        if not items:
            raise PreservesDecodeError("Too few elements in encoded record")
        return Record(items[0], items[1:]), i
    if tag == 0xB0:
        raw, i = _take(data, i)
        return int.from_bytes(raw, "big", signed=True), i
    if tag == 0xB3:
        raw, i = _take(data, i)
        return _symbol(raw), i
    if tag == 0xB1:
        raw, i = _take(data, i)
        return raw.decode("utf-8"), i
    if tag == 0xB2:
        return _take(data, i)
    if tag == 0x80:
        return False, i
    if tag == 0x81:
        return True, i
    if tag == 0x86:
        inner, i = _decode(data, i, emb)
        return Embedded(emb(inner)), i
    if tag == 0x85:
        _annotation, i = _decode(data, i, emb)
        return _decode(data, i, emb)
    if tag == 0x87:
        if i >= len(data):
            raise _Short
        if data[i] != 8:
            raise PreservesDecodeError("Invalid IEEE754 size")
        end = i + 9
        if end > len(data):
            raise _Short
        return _DOUBLE.unpack_from(data, i + 1)[0], end
    if tag == 0xB6:
        vs, i = _values(data, i, emb)
        s = frozenset(vs)
        if len(s) != len(vs):
            raise PreservesDecodeError("Duplicate value")
        return s, i
    if tag == 0xB7:
        vs, i = _values(data, i, emb)
        return ImmutableDict.from_kvs(vs), i
    if tag == 0x84:
        raise PreservesDecodeError("Unexpected end-of-stream marker")
    raise PreservesDecodeError("Invalid tag: " + hex(tag))


def _values(data: bytes, i: int, emb: Callable[[Any], Any]) -> tuple[list[Value], int]:
    items: list[Value] = []
    n = len(data)
    while True:
        if i >= n:
            raise _Short
        if data[i] == 0x84:
            return items, i + 1
        v, i = _decode(data, i, emb)
        items.append(v)


def decode_from(
    data: bytes, index: int = 0, decode_embedded: Callable[[Any], Any] = lambda x: x
) -> tuple[Value, int] | None:
    """``(value, index after it)`` of the value at ``index``, or None when ``data`` ends
    inside it (read more and try again)."""
    try:
        return _decode(data, index, decode_embedded)
    except _Short:
        return None
