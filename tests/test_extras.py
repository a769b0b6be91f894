"""A server-only install: the base package runs the server and the clients without the
``pipeline`` and ``cluster`` extras, and every command that needs one says which, in one line,
with exit 2. The missing packages are hidden from real ``octosync`` processes by an import hook
(this venv has them all), so the test runs the real command line."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from octosync import __version__, extras
from octosync.errors import MissingExtra
from tests.e2e.helpers import free_port, running
from tests.test_readme import blocks

HIDDEN = ("pyspark", "pyarrow", "pandas", "matplotlib", "duckdb", "nats", "numpy", "tantivy")
HIDE = f"""
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {HIDDEN!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
"""
SMALL_INSTALL = HIDE + "from octosync.cli import main\nsys.exit(main())\n"


def small(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SMALL_INSTALL, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_extra_of_names_the_extra_of_a_module() -> None:
    assert extras.extra_of("pyspark.sql") == "pipeline"
    assert extras.extra_of("nats.js.kv") == "cluster"
    assert extras.extra_of("aiohttp") is None
    assert extras.extra_of(None) is None


def test_require_passes_here_and_names_the_pip_command_when_missing() -> None:
    extras.require("pipeline", "x")  # this venv has every extra
    assert extras.missing("cluster") == []
    err = extras.missing_extra("cluster", "serve --cluster")
    assert isinstance(err, MissingExtra)
    assert str(err) == (
        "serve --cluster needs the cluster extra, which is not installed: "
        "pip install '.[cluster]' in a clone of octosync "
        f"(or pip install 'octosync-{__version__}-py3-none-any.whl[cluster]')"
    )


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["pipeline", "report", "--journal", ".", "--out", "r"], "pipeline"),
        (["pipeline", "compact", "--journal", ".", "--out", "c"], "pipeline"),
        (["journal", "export", "--data", "var", "--to", "out"], "pipeline"),
        (["journal", "generate", "--data", "var", "--ops", "10"], "pipeline"),
        (["chain", "up"], "cluster"),
        (["cluster", "status"], "cluster"),
        (["serve", "--insecure-dev", "--cluster", "nats://127.0.0.1:4222"], "cluster"),
        (["serve", "--insecure-dev", "--chain-config", "nats://127.0.0.1:4222"], "cluster"),
    ],
)
def test_a_command_needing_a_missing_extra_says_so_in_one_line(
    args: list[str], extra: str, tmp_path: Path
) -> None:
    ran = small(*args, cwd=tmp_path)
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == 2, ran.stderr
    assert len(lines) == 1, ran.stderr
    assert f"needs the {extra} extra" in lines[0]
    assert f"pip install '.[{extra}]' in a clone of octosync" in lines[0]


def test_the_server_runs_without_the_extras(tmp_path: Path) -> None:
    port = free_port()
    serve = ("serve", "--insecure-dev", "--port", str(port))
    with running(*serve, command=(sys.executable, "-c", SMALL_INSTALL), cwd=tmp_path) as (
        proc,
        line,
    ):
        assert "octosync serving" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            assert reply.status == 200
        ran = small("watch", "nobody", "--url", f"ws://127.0.0.1:{port}/wvp", cwd=tmp_path)
        assert ran.returncode == 2  # a client command too (its line is tests/test_cli.py's)
        (topgun_example,) = [s for i, s in blocks("python", live=True) if "topgun.md" in i]
        example = HIDE + topgun_example.replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        ran = subprocess.run(  # TopGun writes: the Merkle tree without NumPy, in both processes
            [sys.executable, "-c", example],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "{'name': 'Ada'}"
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert err.count("journal export is off: it needs the pipeline extra") == 1


def test_a_base_install_server_trims_its_journal(tmp_path: Path) -> None:
    """Without pyarrow there is no export, yet the maintenance round trims what checkpoints
    cover, so a base install's journal stays bounded (it used to keep every record)."""
    from octosync.store.journal import Journal

    port, data = free_port(), tmp_path / "var"
    config = tmp_path / "octosync.toml"
    config.write_text("[server]\ncheckpoint_interval = 0.2\n")
    serve = ("serve", "--insecure-dev", "--port", str(port), "--data", str(data))
    small_command = (sys.executable, "-c", SMALL_INSTALL)
    with running(*serve, "--config", str(config), command=small_command, cwd=tmp_path) as (
        proc,
        line,
    ):
        assert "octosync serving" in line, (line, proc.poll())
        url = ("--url", f"ws://127.0.0.1:{port}/lazily")
        with running(
            "publish-demo", "scoreboard", "--interval", "0.02", *url, command=small_command
        ) as (demo, first):
            assert "publishing" in first, (first, demo.poll())
            trimmed_before = 1
            for _ in range(600):  # bounded: until a round trimmed past 50 records
                with Journal(data, readonly=True) as journal:
                    trimmed_before = journal.trimmed_before()
                if trimmed_before > 50:
                    break
                time.sleep(0.1)
            assert trimmed_before > 50
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert not (data / "export").exists()
    assert err.count("journal export is off: it needs the pipeline extra") == 1
