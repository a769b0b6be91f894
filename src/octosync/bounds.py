"""Bounds every layer shares, defined once."""

from __future__ import annotations

from typing import Final

MAX_SAFE_INTEGER: Final = 2**53
"""Largest id or epoch accepted anywhere: JavaScript's exact-integer bound, so a value every
peer can hold exactly, whatever dialect carried it."""

MAX_HLC_COUNTER: Final = 2**31 - 1
"""An HLC timestamp's counter: 31 bits wherever a timestamp goes (the wire, the journal); a
clock whose counter would pass it moves into the next millisecond instead."""

NODE_KEY_PATTERN: Final = r"^[^/]+(/[^/]+)*$"
"""A node key (a node's name on the wire): non-empty parts joined by '/' (``scores/alice``)."""
NODE_KEY_MAX: Final = 1024
