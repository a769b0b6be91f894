"""Type-tag registry: stable cross-process keys mapping node values to bytes and back.

The channel only moves bytes; the tag names how to read them. Built-in tags are fixed-width
big-endian for numbers and JSON for ``json``, so any language can decode them.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from octosync.errors import TypeTagError

Encode = Callable[[Any], bytes]
Decode = Callable[[bytes], Any]

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_json_encoder = msgspec.json.Encoder(order="sorted")
_json_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class TypeTag:
    name: str
    encode: Encode
    decode: Decode


def _int_codec(packer: struct.Struct, name: str) -> tuple[Encode, Decode]:
    def enc(value: Any) -> bytes:
        if type(value) is not int:
            raise TypeTagError(f"{name} needs an int, got {type(value).__name__}")
        try:
            return packer.pack(value)
        except struct.error as exc:
            raise TypeTagError(f"{value} does not fit {name}") from exc

    def dec(data: bytes) -> Any:
        if len(data) != packer.size:
            raise TypeTagError(f"{name} needs {packer.size} bytes, got {len(data)}")
        return packer.unpack(data)[0]

    return enc, dec


def _f64_enc(value: Any) -> bytes:
    if type(value) not in (float, int) or isinstance(value, bool):
        raise TypeTagError(f"f64 needs a float, got {type(value).__name__}")
    return _F64.pack(float(value))


def _f64_dec(data: bytes) -> Any:
    if len(data) != 8:
        raise TypeTagError(f"f64 needs 8 bytes, got {len(data)}")
    return _F64.unpack(data)[0]


def _bool_enc(value: Any) -> bytes:
    if type(value) is not bool:
        raise TypeTagError(f"bool needs a bool, got {type(value).__name__}")
    return b"\x01" if value else b"\x00"


def _bool_dec(data: bytes) -> Any:
    if data not in (b"\x00", b"\x01"):
        raise TypeTagError("bool needs one byte 0x00 or 0x01")
    return data == b"\x01"


def _str_enc(value: Any) -> bytes:
    if type(value) is not str:
        raise TypeTagError(f"string needs a str, got {type(value).__name__}")
    return value.encode("utf-8")


def _str_dec(data: bytes) -> Any:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TypeTagError("string payload is not valid UTF-8") from exc


def _bytes_enc(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeTagError(f"bytes needs bytes, got {type(value).__name__}")
    return bytes(value)


def _json_enc(value: Any) -> bytes:
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeTagError("json cannot carry NaN or infinity")
    try:
        return _json_encoder.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeTagError(f"json cannot encode {type(value).__name__}: {exc}") from exc


def _json_dec(data: bytes) -> Any:
    try:
        return _json_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise TypeTagError(f"json payload does not decode: {exc}") from exc


def _builtins() -> dict[str, TypeTag]:
    i32 = _int_codec(_I32, "i32")
    i64 = _int_codec(_I64, "i64")
    return {
        t.name: t
        for t in (
            TypeTag("i32", *i32),
            TypeTag("i64", *i64),
            TypeTag("f64", _f64_enc, _f64_dec),
            TypeTag("bool", _bool_enc, _bool_dec),
            TypeTag("string", _str_enc, _str_dec),
            TypeTag("bytes", _bytes_enc, bytes),
            TypeTag("json", _json_enc, _json_dec),
        )
    }


class TypeRegistry:
    """Per-implementation tag table; built-ins are always present and cannot be replaced."""

    def __init__(self) -> None:
        self._tags: dict[str, TypeTag] = _builtins()

    def register(self, name: str, encode: Encode, decode: Decode) -> TypeTag:
        if not name:
            raise TypeTagError("a type tag needs a non-empty name")
        if name in self._tags:
            raise TypeTagError(f"type tag {name!r} is already registered")
        tag = TypeTag(name, encode, decode)
        self._tags[name] = tag
        return tag

    def get(self, name: str) -> TypeTag:
        try:
            return self._tags[name]
        except KeyError:
            raise TypeTagError(f"unknown type tag {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tags

    def encode(self, name: str, value: Any) -> bytes:
        return self.get(name).encode(value)

    def decode(self, name: str, data: bytes) -> Any:
        return self.get(name).decode(data)


default_registry = TypeRegistry()
"""The process-wide registry used when a Context or Mirror is not given one."""
