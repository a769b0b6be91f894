"""``octosync chain device | watch | status`` as processes against a real link and NATS."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from octosync.links.cli import start_node
from tests.e2e.helpers import refusal


def chain_cli(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "octosync.links.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    return done.stdout.splitlines()


async def test_device_watch_and_status(nats_url: str, tmp_path: Path) -> None:
    proc, port = await asyncio.to_thread(
        start_node, "cli", "n1", nats_url, "octosync.chain.game:compute", tmp_path / "n1"
    )
    common = ["--chain", "cli", "--config", nats_url]
    try:
        lines = await asyncio.to_thread(
            chain_cli,
            "device",
            *common,
            "--name",
            "ann",
            "--events",
            "4",
            "--interval",
            "0.05",
            "--data",
            str(tmp_path / "devices"),
        )
        last = json.loads(lines[-1])
        assert last["sent"] == 5
        assert (tmp_path / "devices" / "ann.sqlite").exists()
        (watched,) = await asyncio.to_thread(chain_cli, "watch", *common, "--limit", "1")
        state = json.loads(watched)["state"]
        assert state["audit"]["ann"]["n"] >= 1
        assert state["players"]["ann"]["name"] == "ann"
        status = json.loads("\n".join(await asyncio.to_thread(chain_cli, "status", *common)))
        assert status["head"] == status["tail"] == "n1"
        assert status["links"][0]["address"] == f"127.0.0.1:{port}"
        assert status["links"][0]["role"] == "head+tail"
    finally:
        proc.kill()
        proc.wait(timeout=10)


async def test_a_second_link_on_the_same_replica_file_exits_2_naming_it_and_the_holder(
    nats_url: str, tmp_path: Path
) -> None:
    """Two links of one id and folder would each write their own replica over the other's: the
    second is refused in one line, and once the first is killed the file is free again."""
    data = tmp_path / "n1"
    app = "octosync.chain.game:compute"
    first, _ = await asyncio.to_thread(start_node, "twins", "n1", nats_url, app, data)
    try:
        args = ["--chain", "twins", "--id", "n1", "--listen", "127.0.0.1:0"]
        args += ["--config", nats_url, "--app", app, "--data", str(data)]
        second = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "octosync.links.cli", "node", *args],
            capture_output=True,
            text=True,
            timeout=90,
        )
        said = refusal(second)
        assert str((data / "n1.sqlite").resolve()) in said
        assert f"process {first.pid}" in said
    finally:
        first.kill()
        first.wait(timeout=10)
    again, _ = await asyncio.to_thread(start_node, "twins", "n1", nats_url, app, data)
    again.kill()
    again.wait(timeout=10)
