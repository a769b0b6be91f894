"""FNV-1a 64-bit, the shared-blob checksum (lazily-rs, lazily-py and lazily-zig agree on it).

Computed in C by ``fnv_c`` over the caller's buffer without a copy (a 64 MiB blob in about
70 ms); the pure-Python loop is the fallback where the extension is missing, and the
reference the tests compare the fast path with.
"""

from __future__ import annotations

from typing import Any

OFFSET_BASIS = 0xCBF29CE484222325
PRIME = 0x100000001B3
MASK = 2**64 - 1

try:
    from fnv_c.ext._fnv import ffi as _ffi  # type: ignore[import-untyped]
    from fnv_c.ext._fnv import lib as _lib
except ImportError:  # pragma: no cover - the dependency is declared
    _ffi = _lib = None


def fnv1a_64_python(data: bytes | bytearray | memoryview) -> int:
    h = OFFSET_BASIS
    for byte in bytes(data):
        h = ((h ^ byte) * PRIME) & MASK
    return h


def fnv1a_64(data: bytes | bytearray | memoryview) -> int:
    """The checksum of ``data`` (read in place)."""
    if _lib is None:
        return fnv1a_64_python(data)
    n = len(data) if not isinstance(data, memoryview) else data.nbytes
    if n == 0:
        return OFFSET_BASIS
    buf: Any = _ffi.from_buffer(data)
    return int(_lib.fnv1a_64(buf, n))
