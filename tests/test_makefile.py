"""The Makefile as a newcomer meets it: ``make run`` installs the base package only, saying so
on a visible line; ``make test`` installs everything; each has its own stamp, so ``make run``
after ``make test`` installs nothing.

The quick tests run the real ``make`` and the real recipes against a stand-in virtual
environment whose ``python`` and ``octosync`` write down how they were called (pip is the part
stood in for); the slow one installs the base package for real into a fresh venv and measures it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool

EXTRAS = "dev,pipeline,cluster,search,vector,sql"


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    make = require_tool("make", "the Makefile's targets")
    return subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _stand_in_venv(root: Path) -> tuple[Path, Path]:
    """A venv whose ``python`` and ``octosync`` append their arguments to a log."""
    venv, log = root / "venv", root / "calls.log"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "octosync"):
        script = venv / "bin" / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        script.chmod(0o755)
    return venv, log


def _calls(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_make_run_installs_the_base_package_visibly_then_only_serves(tmp_path: Path) -> None:
    venv, log = _stand_in_venv(tmp_path)
    first = _make("run", f"VENV={venv}", "PORT=8777", "HOST=127.0.0.2")
    assert first.returncode == 0, first.stderr
    assert f"octosync: installing the server and its clients into {venv}" in first.stdout
    assert _calls(log) == [
        "python -m pip install --progress-bar off --upgrade pip",
        "python -m pip install --progress-bar off -e .",
        "octosync serve --data ./var --insecure-dev --host 127.0.0.2 --port 8777",
    ]
    again = _make("run", f"VENV={venv}")
    assert again.returncode == 0, again.stderr
    assert "installing" not in again.stdout
    assert _calls(log) == [
        "octosync serve --data ./var --insecure-dev --host 127.0.0.1 --port 8765"
    ]


def test_make_test_installs_everything_and_make_run_after_it_installs_nothing(
    tmp_path: Path,
) -> None:
    venv, log = _stand_in_venv(tmp_path)
    full = _make(f"{venv}/.installed", f"VENV={venv}")  # what lint, typecheck, pytest need
    assert full.returncode == 0, full.stderr
    assert "every extra" in full.stdout
    assert _calls(log) == [
        "python -m pip install --progress-bar off --upgrade pip",
        f"python -m pip install --progress-bar off -e .[{EXTRAS}]",
    ]
    run = _make("run", f"VENV={venv}")
    assert run.returncode == 0, run.stderr
    assert "installing" not in run.stdout
    assert _calls(log) == [
        "octosync serve --data ./var --insecure-dev --host 127.0.0.1 --port 8765"
    ]
    dry = _make("-n", "test", f"VENV={venv}")
    assert "pip install" not in dry.stdout  # installed: make test goes straight to work
    assert f"{venv}/bin/ruff check" in dry.stdout


def test_no_install_is_quiet() -> None:
    installs = [ln for ln in (ROOT / "Makefile").read_text().splitlines() if "pip install" in ln]
    assert len(installs) == 4
    assert not [ln for ln in installs if "--quiet" in ln or " -q" in ln]


@pytest.mark.slow
def test_the_base_install_is_small_and_serves(tmp_path: Path) -> None:
    """``make run``'s install for real, into a fresh venv (PyPI for the dependencies)."""
    venv = tmp_path / "venv"
    python = f"PYTHON={sys.executable}"
    done = _make(f"{venv}/.installed-base", f"VENV={venv}", python)
    assert done.returncode == 0, done.stdout + done.stderr
    (site,) = (venv / "lib").glob("python3*/site-packages")
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    assert size < 150 * 2**20, f"base install is {size / 2**20:.0f} MB"
    found = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import importlib.util as u; "
            "print([m for m in ('pyspark', 'pyarrow', 'pytest', 'nats') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "[]"
    ran = subprocess.run(
        [venv / "bin" / "octosync", "serve", "--help"], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    print(f"base install: {size / 2**20:.1f} MB of site-packages")
