"""``octosync cluster up | status | down`` and ``serve --cluster`` as a user runs them: real
processes on loopback (free ports), every one of them stopped at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.helpers import free_port, free_port_run

CLI = [sys.executable, "-m", "octosync.cli"]
TIMEOUT = 90


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_status_down(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    nats_port, first = free_port(), free_port_run(2)
    up = run(
        "cluster", "up", "--nodes", "2", "--data", str(data),
        "--nats-port", str(nats_port), "--port", str(first),
    )  # fmt: skip
    state_file = data / "cluster.json"
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(state_file.read_text())
        pids = [n["pid"] for n in state["nodes"]] + [state["nats"]["pid"]]
        assert all(alive(p) for p in pids)
        assert f"ws://127.0.0.1:{first}/lazily" in up.stdout
        status = run("cluster", "status", "--cluster", state["nats"]["url"], "--listen", "1.5")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert [n["node"] for n in shown["nodes"]] == ["n1", "n2"]
        assert shown["nodes"][1]["url"] == f"ws://127.0.0.1:{first + 1}/lazily"
        again = run("cluster", "up", "--data", str(data))
        assert again.returncode != 0
        assert "cluster down" in one_line(again)
        down = run("cluster", "down", "--data", str(data))
        assert down.returncode == 0, down.stderr
        assert not any(alive(p) for p in pids)
        assert not state_file.exists()
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, 9)


def test_mistakes_end_in_one_line(tmp_path: Path) -> None:
    bad_url = run("serve", "--insecure-dev", "--cluster", "http://x", "--data", str(tmp_path))
    assert bad_url.returncode != 0
    assert "nats://HOST:PORT" in one_line(bad_url)
    bad_id = run(
        "serve", "--insecure-dev", "--cluster", "nats://127.0.0.1:1", "--node-id", "a b",
        "--data", str(tmp_path),
    )  # fmt: skip
    assert bad_id.returncode != 0
    assert "--node-id" in one_line(bad_id)
    unreachable = run(
        "serve", "--insecure-dev", "--port", str(free_port()), "--data", str(tmp_path),
        "--cluster", f"nats://127.0.0.1:{free_port()}", "--node-id", "n1",
    )  # fmt: skip
    assert unreachable.returncode != 0
    assert "cannot reach NATS" in one_line(unreachable)
    nothing = run("cluster", "down", "--data", str(tmp_path / "none"))
    assert nothing.returncode != 0
    assert "no cluster to stop" in one_line(nothing)
    zero = run("cluster", "up", "--nodes", "0", "--data", str(tmp_path / "z"))
    assert zero.returncode != 0
    assert "--nodes" in one_line(zero)
