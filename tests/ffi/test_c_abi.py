"""The C ABI as a real shared library (cffi embedding mode), driven by a C program gcc builds:
frames encoded and decoded, statuses for bad input and null pointers, a mirror handle."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from octosync.ffi.build import build
from tests.conftest import require_tool

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("gcc", "builds the C program that drives the library")
    out = tmp_path_factory.mktemp("ffi")
    library = build(out)
    assert library.name == "liboctosync_ffi.so"
    exe = out / "abi_check"
    subprocess.run(
        [
            "gcc",
            "-Wall",
            "-Werror",
            str(HERE / "abi_check.c"),
            f"-I{out}",
            f"-L{out}",
            "-loctosync_ffi",
            f"-Wl,-rpath,{out}",
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe


def test_the_c_program_passes_every_check(program: Path) -> None:
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[:3000]
    assert "failures 0" in lines
    checks = [line for line in lines if line.startswith(("ok ", "FAIL "))]
    assert len(checks) == 21
    assert all(line.startswith("ok ") for line in checks)
    assert 'reply {"ResyncRequest":{"from_epoch":2}}' in lines


def test_the_header_declares_the_seed_types(program: Path) -> None:
    header = " ".join((program.parent / "octosync_ffi.h").read_text().split())
    for name in (
        "} LazilyFfiBytes;",
        "LazilyFfiStatus_Ok = 0,",
        "LazilyFfiStatus_NullPointer = 2,",
        "LazilyFfiStatus_Panic = 5",
        "LazilyFfiMessageKind_Delta = 2,",
        "LazilyFfiMessageKind_CrdtSync = 3,",
        "void lazily_ffi_bytes_free(LazilyFfiBytes* bytes);",
    ):
        assert name in header
