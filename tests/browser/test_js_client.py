"""The JavaScript client's own tests (``clients/js/test``), run by Node's built-in test runner.

They start real servers on loopback themselves (``python -m octosync.cli serve``, this
interpreter); every text frame the client sent or received is recorded and checked here against
the protocol's JSON Schemas (``docs/schemas``), so the documented format is the one spoken.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.browser.support import JS_CLIENT, node_command
from tests.protocol_schemas import validate_lazily

NODE_TIMEOUT = 150.0


def test_js_client_under_node(tmp_path: Path) -> None:
    node = node_command()
    frames = tmp_path / "frames.jsonl"
    tests = sorted(str(p) for p in (JS_CLIENT / "test").glob("*.test.mjs"))
    env = {**os.environ, "OCTOSYNC_PYTHON": sys.executable, "OCTOSYNC_FRAMES_OUT": str(frames)}
    run = subprocess.run(
        [*node, "--test", "--test-reporter=tap", *tests],
        cwd=JS_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
        check=False,
    )
    report = run.stdout + run.stderr
    (tmp_path / "node-test.tap").write_text(report)
    counts = dict(re.findall(r"^# (pass|fail|skipped|todo) (\d+)$", run.stdout, re.M))
    assert run.returncode == 0, report[-6000:]
    assert counts.get("fail") == "0", report[-6000:]
    assert counts.get("skipped") == "0", report[-6000:]
    assert int(counts["pass"]) >= 20, counts

    seen: dict[str, set[str]] = {"sent": set(), "received": set()}
    for line in frames.read_text().splitlines():
        record = json.loads(line)
        kind = validate_lazily(record["direction"], record["data"])
        seen[record["direction"]].add(kind)
    # The recorded traffic covers every message the client speaks (so the check above means
    # something): handshakes both ways, state both ways, writes, resync requests, errors.
    sent = {"handshake", "snapshot", "delta", "resync_request", "crdt_sync", "remote_op"}
    sent |= {"remote_op_result"}
    assert sent <= seen["sent"], seen
    received = {"handshake", "snapshot", "delta", "error", "crdt_sync", "remote_op"}
    received |= {"remote_op_result"}
    assert received <= seen["received"], seen
