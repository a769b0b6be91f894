"""Shared test set-up: hypothesis profiles and the path to the shared conformance data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT.parent / "shared" / "conformance"


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    """``../shared/conformance`` beside the project: fixtures are loaded, never copied."""
    if not CONFORMANCE.is_dir():
        pytest.fail(f"conformance data not found at {CONFORMANCE}: clone beside ../shared")
    return CONFORMANCE
