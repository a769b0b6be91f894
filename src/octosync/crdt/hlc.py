"""Hybrid logical clock: wall-clock millis for human order, a counter for causality.

The clock is injected (a callable returning epoch millis) so the core never reads wall time and
tests can drive it. Every timestamp issued is strictly greater than every timestamp issued or
received before, even when the wall clock stalls or steps back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from octosync.bounds import MAX_HLC_COUNTER
from octosync.crdt.timestamp import Timestamp
from octosync.errors import ClockDrift, LocalProtocolError

MAX_COUNTER = MAX_HLC_COUNTER
DEFAULT_MAX_DRIFT_MS = 60_000

Clock = Callable[[], int]


class ClockDriftWarning(UserWarning):
    """A remote timestamp ahead of local time by more than the allowed drift (lenient mode)."""


class HLC:
    __slots__ = (
        "_clock",
        "_counter",
        "_millis",
        "drift_events",
        "max_drift_ms",
        "node_id",
        "strict",
    )

    def __init__(
        self,
        node_id: str,
        clock: Clock,
        *,
        max_drift_ms: int = DEFAULT_MAX_DRIFT_MS,
        strict: bool = False,
    ) -> None:
        if not node_id or ":" in node_id:
            raise LocalProtocolError(
                f"node id must be non-empty and contain no ':', got {node_id!r}", path="node_id"
            )
        self.node_id = node_id
        self._clock = clock
        self.max_drift_ms = max_drift_ms
        self.strict = strict
        self._millis = 0
        self._counter = 0
        self.drift_events = 0

    def last(self) -> Timestamp:
        """The latest timestamp issued or merged (no tick)."""
        return Timestamp(self._millis, self._counter, self.node_id)

    def now(self) -> Timestamp:
        """A fresh timestamp for a local event."""
        wall = self._clock()
        if wall > self._millis:
            self._millis, self._counter = wall, 0
        else:
            self._set(self._millis, self._counter + 1)
        return Timestamp(self._millis, self._counter, self.node_id)

    def update(self, remote: Timestamp) -> Timestamp:
        """Merge a received timestamp; returns the local timestamp of the receive event.

        A remote timestamp more than ``max_drift_ms`` ahead of the wall clock raises
        :class:`ClockDrift` in strict mode (the clock is left unchanged) and is otherwise
        accepted with a :class:`ClockDriftWarning`, as an available-first system must.
        """
        wall = self._clock()
        drift = remote.millis - wall
        if drift > self.max_drift_ms:
            self.drift_events += 1
            message = (
                f"remote time {remote.millis} from {remote.node_id!r} is {drift} ms ahead of "
                f"local {wall} (limit {self.max_drift_ms} ms)"
            )
            if self.strict:
                raise ClockDrift(message, path="timestamp.millis")
            warnings.warn(message, ClockDriftWarning, stacklevel=2)
        top = max(self._millis, wall, remote.millis)
        if top == self._millis and top == remote.millis:
            counter = max(self._counter, remote.counter) + 1
        elif top == self._millis:
            counter = self._counter + 1
        elif top == remote.millis:
            counter = remote.counter + 1
        else:
            counter = 0
        self._set(top, counter)
        return Timestamp(self._millis, self._counter, self.node_id)

    def _set(self, millis: int, counter: int) -> None:
        # A counter that would overflow its 31 bits moves the clock into the next millisecond.
        if counter > MAX_COUNTER:
            millis, counter = millis + 1, 0
        self._millis, self._counter = millis, counter
