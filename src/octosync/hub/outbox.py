"""Per-connection outbox: bounded in bytes and frames, drained whole in one write.

The hub queues control frames here; stream data goes through the shared ``FrameLog``, whose
per-member behaviour is exactly this class's data queue (the tests check one against the other).

Data frames (snapshots, deltas) are shared ``bytes`` objects encoded once per view; the outbox
only holds references. When a push would exceed a bound the queued data is dropped and the
outbox reports an overflow, so the hub can replace the lost deltas with one fresh snapshot.
Control frames (errors, acks, forwarded writes) queue separately with their own small bound:
they are never the reason a subscriber is reset.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OutboxLimits:
    max_bytes: int = 4 * 1024 * 1024
    max_frames: int = 1024
    max_control_frames: int = 256

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_frames <= 0 or self.max_control_frames <= 0:
            raise ValueError("outbox limits must be positive")


OVERFLOW = 0
"""``push`` result: the bound was hit, the queue was emptied (reset the subscriber)."""
WAS_EMPTY = 1
"""``push`` result: queued into an empty outbox (the connection needs waking)."""
QUEUED = 2
"""``push`` result: queued behind other frames (the connection is already awake)."""


class Outbox:
    """A bounded queue of encoded frames for one connection."""

    __slots__ = (
        "_control",
        "_data",
        "_data_bytes",
        "_max_bytes",
        "_max_frames",
        "dropped_control",
        "dropped_frames",
        "last_dropped",
        "limits",
    )

    def __init__(self, limits: OutboxLimits) -> None:
        self.limits = limits
        self._max_bytes = limits.max_bytes
        self._max_frames = limits.max_frames
        self._data: deque[bytes] = deque()
        self._data_bytes = 0
        self._control: deque[bytes] = deque()
        self.dropped_frames = 0
        self.last_dropped = 0
        """Frames the most recent overflow dropped (the queued ones plus the one refused)."""
        self.dropped_control = 0

    @property
    def depth_frames(self) -> int:
        return len(self._data) + len(self._control)

    @property
    def depth_bytes(self) -> int:
        return self._data_bytes + sum(len(b) for b in self._control)

    def __bool__(self) -> bool:
        return bool(self._data) or bool(self._control)

    def push(self, frame: bytes) -> int:
        """Queue a data frame: ``WAS_EMPTY``, ``QUEUED``, or ``OVERFLOW`` (queue emptied).

        A frame into an empty queue is always accepted, so one snapshot larger than the byte
        bound still goes out instead of resetting forever. This is the per-subscriber hot path.
        """
        data = self._data
        size = len(frame)
        if data:
            if len(data) >= self._max_frames or self._data_bytes + size > self._max_bytes:
                self.last_dropped = len(data) + 1
                self.dropped_frames += self.last_dropped
                data.clear()
                self._data_bytes = 0
                return OVERFLOW
            data.append(frame)
            self._data_bytes += size
            return QUEUED
        data.append(frame)
        self._data_bytes = size
        return QUEUED if self._control else WAS_EMPTY

    def control_full(self) -> bool:
        """The next control frame would drop the oldest one (a caller that must not lose a
        frame resets the connection instead)."""
        return len(self._control) >= self.limits.max_control_frames

    def push_control(self, frame: bytes) -> None:
        """Queue a control frame; past its bound the oldest control frame is dropped."""
        if len(self._control) >= self.limits.max_control_frames:
            self._control.popleft()
            self.dropped_control += 1
        self._control.append(frame)

    def take(self) -> list[bytes]:
        """Everything queued, control first: the caller writes it as one batch."""
        control, data, _ = self.take_parts()
        control.extend(data)
        return control

    def take_parts(self) -> tuple[list[bytes], list[bytes], int]:
        """``(control frames, data frames, data bytes)``, emptying the outbox."""
        control = list(self._control)
        data = list(self._data)
        size = self._data_bytes
        self._control.clear()
        self._data.clear()
        self._data_bytes = 0
        return control, data, size
