"""lazily-py (PyPI ``lazily``, the spec's Python binding) as a real peer in a subprocess.

It needs Python 3.12 or newer: the first such interpreter found (``OCTOSYNC_PYTHON312``, then
on PATH, then under pyenv) gets a virtual environment in the cache folder
(``$XDG_CACHE_HOME/octosync/lazily-py-0.45.0``) with ``lazily`` installed once; every test
that runs lazily-py gets it from ``require_lazily_python()``, which skips with one line when
there is none (``tests.conftest.missing``: a failure under ``OCTOSYNC_REQUIRE_PEERS=1``).
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import missing

LAZILY = "lazily==0.45.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "octosync"
VENV = CACHE / "lazily-py-0.45.0"


def _interpreters() -> list[str]:
    given = [os.environ.get("OCTOSYNC_PYTHON312", "")]
    found = [shutil.which(f"python3.{minor}") or "" for minor in range(12, 16)]
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    return [p for p in [*given, *found, *pyenv] if p]


def _has_lazily(python: Path) -> bool:
    probe = [str(python), "-c", "import lazily.crdt_plane, lazily.ipc, lazily.transport"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@functools.cache
def lazily_python() -> Path | None:
    python = VENV / "bin" / "python"
    if python.exists() and _has_lazily(python):
        return python
    for base in _interpreters():
        try:
            if not python.exists():
                subprocess.run([base, "-m", "venv", str(VENV)], check=True, capture_output=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", LAZILY],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (subprocess.SubprocessError, OSError):
            continue
        if _has_lazily(python):
            return python
    return None


def require_lazily_python() -> Path:
    """``lazily_python()``, or ``missing`` (a skip, a failure under
    ``OCTOSYNC_REQUIRE_PEERS=1``) saying why there is none."""
    python = lazily_python()
    if python is None:
        missing(
            f"no Python 3.12+ interpreter could install {LAZILY} into {VENV}: "
            "lazily-py interop skipped"
        )
    return python


def run_lazily(script: str, stdin: str = "", timeout: float = 60) -> str:
    """Run ``script`` under lazily-py's interpreter; returns its stdout (raises on failure)."""
    python = require_lazily_python()
    done = subprocess.run(
        [str(python), "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise AssertionError(f"lazily-py failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout
