"""The wheel ``make wheel`` builds, as a newcomer would use it: installed into an empty venv
(its dependencies from PyPI), ``octosync serve`` from that venv on loopback, the quickstart's
Python block against it, and the JavaScript client and the inspector served from the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from octosync import __version__
from tests.conftest import ROOT, require_tool
from tests.e2e.helpers import free_port, running
from tests.test_readme import blocks

JS_CLIENT = ROOT / "clients" / "js" / "octosync.js"


def _quickstart_python() -> str:
    (source,) = [s for i, s in blocks("python", live=True) if i.startswith("README.md#")]
    return source


@pytest.mark.slow
def test_the_wheel_installs_into_an_empty_venv_and_serves_the_quickstart(tmp_path: Path) -> None:
    make = require_tool("make", "make wheel")
    dist = tmp_path / "dist"
    venv_of_tests = Path(sys.prefix)
    built = subprocess.run(
        [make, "-C", str(ROOT), "wheel", f"DIST={dist}", f"VENV={venv_of_tests}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("octosync-*.whl")
    assert wheel.name == f"octosync-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert z.read("octosync/server/static/octosync.js") == JS_CLIENT.read_bytes()
        assert {
            "octosync/server/static/inspector.html",
            "octosync/server/static/inspector.js",
        } <= names
        assert f"octosync-{__version__}.dist-info/licenses/LICENSE" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--progress-bar", "off", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import octosync; print(octosync.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout  # the wheel, not the source tree

    port = free_port()
    serve = ("serve", "--insecure-dev", "--port", str(port), "--data", str(tmp_path / "var"))
    command = (str(venv / "bin" / "octosync"),)
    with running(*serve, command=command, cwd=tmp_path, env=env) as (proc, line):
        assert "octosync serving" in line, (line, proc.poll())
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/client/octosync.js", timeout=30) as reply:
            assert reply.read() == JS_CLIENT.read_bytes()
        with urllib.request.urlopen(f"{base}/", timeout=30) as reply:
            assert b"inspector" in reply.read().lower()
        example = _quickstart_python().replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        ran = subprocess.run(
            [venv / "bin" / "python", "-c", example],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "clicks: 100"
