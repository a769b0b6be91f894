"""Build the lazily C ABI as a shared library with cffi's embedding mode.

    python -m octosync.ffi.build OUTDIR

writes ``OUTDIR/liboctosync_ffi.so`` and ``OUTDIR/octosync_ffi.h``. A C program includes the
header and links the library (``gcc app.c -IOUTDIR -LOUTDIR -loctosync_ffi``); the first call
starts an embedded CPython that imports ``octosync.ffi.boundary`` from the interpreter and
paths that built the library. Ownership follows the seed: the caller owns its input bytes;
every ``LazilyFfiBytes`` the library fills is the library's until
``lazily_ffi_bytes_free``; a handle lives until ``lazily_ffi_mirror_free``. No Python
exception crosses the boundary: each becomes ``LazilyFfiStatus_Panic``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cffi  # type: ignore[import-untyped]

HEADER = """\
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t* ptr;
    size_t   len;
} LazilyFfiBytes;

typedef enum {
    LazilyFfiStatus_Ok             = 0,
    LazilyFfiStatus_Empty          = 1,
    LazilyFfiStatus_NullPointer    = 2,
    LazilyFfiStatus_InvalidMessage = 3,
    LazilyFfiStatus_EncodeFailed   = 4,
    LazilyFfiStatus_Panic          = 5
} LazilyFfiStatus;

typedef enum {
    LazilyFfiMessageKind_Unknown       = 0,
    LazilyFfiMessageKind_Snapshot      = 1,
    LazilyFfiMessageKind_Delta         = 2,
    LazilyFfiMessageKind_CrdtSync      = 3,
    LazilyFfiMessageKind_ResyncRequest = 4,
    LazilyFfiMessageKind_OutboxAck     = 5
} LazilyFfiMessageKind;

typedef struct LazilyFfiMirror LazilyFfiMirror;
"""

API = """\
LazilyFfiStatus lazily_ffi_frame_encode(const uint8_t* message, size_t len,
                                        LazilyFfiMessageKind* kind, LazilyFfiBytes* frame);
LazilyFfiStatus lazily_ffi_frame_decode(const uint8_t* frame, size_t len,
                                        LazilyFfiMessageKind* kind, LazilyFfiBytes* message);
void lazily_ffi_bytes_free(LazilyFfiBytes* bytes);
LazilyFfiMirror* lazily_ffi_mirror_new(void);
LazilyFfiStatus lazily_ffi_mirror_apply(LazilyFfiMirror* mirror, const uint8_t* message,
                                        size_t len, LazilyFfiMessageKind* kind,
                                        LazilyFfiBytes* reply);
LazilyFfiStatus lazily_ffi_mirror_epoch(LazilyFfiMirror* mirror, uint64_t* epoch);
void lazily_ffi_mirror_free(LazilyFfiMirror* mirror);
"""

INIT = """\
import sys
# the builder's import path first, in its order (so the octosync that built this library is
# the one it runs), then whatever else the embedded interpreter found
sys.path[:] = PATHS + [p for p in sys.path if p not in PATHS]

from _octosync_ffi import ffi, lib
from octosync.ffi.boundary import Kind, MirrorHandle, Status, frame_decode, frame_encode

_owned = {}
_mirrors = {}
_PANIC = int(Status.PANIC)


def _fill(out, data):
    if not data:
        out.ptr = ffi.NULL
        out.len = 0
        return
    buf = ffi.new("uint8_t[]", data)
    _owned[int(ffi.cast("uintptr_t", buf))] = buf
    out.ptr = buf
    out.len = len(data)


def _call(fn, data, length, kind, out):
    if data == ffi.NULL or kind == ffi.NULL or out == ffi.NULL:
        return int(Status.NULL_POINTER)
    out.ptr = ffi.NULL
    out.len = 0
    kind[0] = int(Kind.UNKNOWN)
    try:
        status, k, result = fn(bytes(ffi.buffer(data, length)))
        kind[0] = int(k)
        _fill(out, result)
        return int(status)
    except BaseException:
        return _PANIC


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_frame_encode(message, length, kind, frame):
    return _call(frame_encode, message, length, kind, frame)


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_frame_decode(frame, length, kind, message):
    return _call(frame_decode, frame, length, kind, message)


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_bytes_free(out):
    if out == ffi.NULL or out.ptr == ffi.NULL:
        return
    _owned.pop(int(ffi.cast("uintptr_t", out.ptr)), None)
    out.ptr = ffi.NULL
    out.len = 0


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_mirror_new():
    handle = ffi.new_handle(MirrorHandle())
    _mirrors[int(ffi.cast("uintptr_t", handle))] = handle
    return ffi.cast("LazilyFfiMirror*", handle)


def _mirror(ptr):
    return ffi.from_handle(_mirrors[int(ffi.cast("uintptr_t", ptr))])


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_mirror_apply(mirror, message, length, kind, reply):
    if mirror == ffi.NULL:
        return int(Status.NULL_POINTER)
    try:
        handle = _mirror(mirror)
    except KeyError:
        return int(Status.NULL_POINTER)
    return _call(handle.apply, message, length, kind, reply)


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_mirror_epoch(mirror, epoch):
    if mirror == ffi.NULL or epoch == ffi.NULL:
        return int(Status.NULL_POINTER)
    try:
        value = _mirror(mirror).epoch
    except KeyError:
        return int(Status.NULL_POINTER)
    except BaseException:
        return _PANIC
    if value is None:
        return int(Status.EMPTY)
    epoch[0] = value
    return int(Status.OK)


@ffi.def_extern(onerror=lambda *exc: None)
def lazily_ffi_mirror_free(mirror):
    if mirror != ffi.NULL:
        _mirrors.pop(int(ffi.cast("uintptr_t", mirror)), None)
"""


def build(out_dir: Path) -> Path:
    """Compile the library into ``out_dir``; returns its path."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "octosync_ffi.h").write_text(
        "#ifndef OCTOSYNC_FFI_H\n#define OCTOSYNC_FFI_H\n" + HEADER + API + "#endif\n"
    )
    builder = cffi.FFI()
    builder.cdef(HEADER.replace("#include <stddef.h>\n#include <stdint.h>\n", ""))
    builder.embedding_api(API)
    builder.set_source("_octosync_ffi", HEADER)
    paths = [p for p in sys.path if p]
    builder.embedding_init_code(f"PATHS = {paths!r}\n" + INIT)
    target = builder.compile(tmpdir=str(out_dir), target="liboctosync_ffi.*", verbose=False)
    return Path(target)


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "build/ffi")))
