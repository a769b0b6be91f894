"""Bounds every layer shares, defined once."""

from __future__ import annotations

from typing import Final

MAX_SAFE_INTEGER: Final = 2**53
"""Largest id or epoch accepted anywhere: JavaScript's exact-integer bound, so a value every
peer can hold exactly, whatever dialect carried it."""
