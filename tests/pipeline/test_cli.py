"""``octosync pipeline ...`` as a user runs it: a real job in a subprocess, its stderr read.

Quiet by default means stderr holds our one line per stage and nothing from the JVM (its
start-up notice, Spark's "Setting default log level" lines, log4j output); ``-v`` shows Spark's
own output. These tests start their own JVM, so they sit before the shared-session tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from octosync.store.journal import Journal
from octosync.store.synthetic import generate_records

pytestmark = pytest.mark.spark

SRC = Path(__file__).resolve().parents[2] / "src"
PROGRESS = re.compile(r"^\[compact \+ *\d+\.\ds\] \S")


def compact(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data"
    with Journal(data) as j:
        j.append(generate_records(300, seed=5))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    code = "import sys; from octosync.cli import main; sys.exit(main())"
    args = ["pipeline", "compact", "--journal", str(data), "--out", str(tmp_path / "out")]
    return subprocess.run(
        [sys.executable, "-c", code, *args, "--master", "local[1]", *extra],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        check=False,
    )


def test_a_job_prints_only_its_progress_lines_by_default(tmp_path: Path) -> None:
    done = compact(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "compacted 300 ops" in done.stdout
    lines = done.stderr.splitlines()
    assert any("fold ops into state" in line for line in lines)
    assert [line for line in lines if not PROGRESS.match(line)] == []


def test_verbose_shows_sparks_own_output(tmp_path: Path) -> None:
    done = compact(tmp_path, "-v")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert any(PROGRESS.match(line) for line in lines)
    assert [line for line in lines if not PROGRESS.match(line)] != []
