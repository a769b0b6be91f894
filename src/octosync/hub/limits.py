"""The one set of limits every face, the hub and the journal share.

A frame is checked against these once, before anything changes state, so nothing is accepted
that the journal could not store or a JavaScript peer could not hold exactly. The journal's
record types take their bounds from here too (``store/records.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.errors import LimitExceeded, Oversize

MAX_EPOCH: Final = MAX_SAFE_INTEGER
"""Largest epoch any stream may reach (JavaScript's exact-integer bound)."""
MAX_STREAM_NAME: Final = 256
"""Longest stream name, in characters."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-server limits; one instance is shared by every face and the hub."""

    max_frame_bytes: int = 1024 * 1024
    """Largest frame any face reads, before it is decoded (``Oversize`` beyond)."""
    max_preauth_frame_bytes: int = 64 * 1024
    """Largest frame read before the connection has authenticated (TCP handshake)."""
    offload_decode_bytes: int = 64 * 1024
    """Frames at least this large are decoded off the event loop's thread."""
    max_epoch: int = MAX_EPOCH
    max_stream_name: int = MAX_STREAM_NAME
    frames_per_second: float = 200_000.0
    """Per-connection input budget; a connection above it is read more slowly, not dropped."""
    bytes_per_second: float = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_frame_bytes", "max_preauth_frame_bytes", "max_stream_name"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not 0 < self.max_epoch <= MAX_EPOCH:
            raise ValueError(f"max_epoch must be in 1..{MAX_EPOCH}")
        if self.frames_per_second <= 0 or self.bytes_per_second <= 0:
            raise ValueError("input budgets must be positive")

    def check_frame_size(self, size: int, *, authenticated: bool = True) -> None:
        limit = self.max_frame_bytes if authenticated else self.max_preauth_frame_bytes
        if size > limit:
            raise Oversize(f"frame of {size} bytes exceeds the limit of {limit}", path="$")

    def check_stream_name(self, name: str) -> None:
        if not name:
            raise LimitExceeded("stream name is empty", path="stream")
        if len(name) > self.max_stream_name:
            raise LimitExceeded(
                f"stream name of {len(name)} characters exceeds {self.max_stream_name}",
                path="stream",
            )

    def check_epoch(self, epoch: int, path: str = "epoch") -> None:
        if not 0 <= epoch <= self.max_epoch:
            raise LimitExceeded(f"epoch {epoch} is outside 0..{self.max_epoch}", path=path)


class InputBudget:
    """A token bucket over frames and bytes for one connection (sans-I/O: pass ``now``).

    ``charge`` returns how long the reader should wait before reading the next frame: a
    connection that sends faster than its budget is slowed down by its own socket's
    backpressure, and never takes the event loop from anyone else.
    """

    __slots__ = ("_bytes", "_frames", "_last", "limits")

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self._frames = limits.frames_per_second
        self._bytes = limits.bytes_per_second
        self._last = now

    def charge(self, size: int, now: float, messages: int = 1) -> float:
        """Charge one frame of ``size`` bytes carrying ``messages`` messages (several for a
        frame that packs them, as TopGun's ``BATCH``: each counts as a frame)."""
        lim = self.limits
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._frames = min(lim.frames_per_second, self._frames + elapsed * lim.frames_per_second)
        self._bytes = min(lim.bytes_per_second, self._bytes + elapsed * lim.bytes_per_second)
        self._frames -= messages
        self._bytes -= size
        wait = 0.0
        if self._frames < 0:
            wait = -self._frames / lim.frames_per_second
        if self._bytes < 0:
            wait = max(wait, -self._bytes / lim.bytes_per_second)
        return wait
