"""What the server counts for ``/metrics``: per face, refusals, and how long the loop stalls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from octosync.server.face_names import FaceName

STALL_BOUNDS = (0.005, 0.010, 0.050, 0.100, 1.0)


@dataclass(slots=True)
class FaceCounters:
    connections: int = 0
    frames_in: int = 0
    bytes_in: int = 0
    errors: int = 0


@dataclass(slots=True)
class Counters:
    faces: dict[FaceName, FaceCounters] = field(
        default_factory=lambda: {f: FaceCounters() for f in FaceName}
    )
    refused_upgrades: int = 0
    """Upgrades answered 401 (no or bad credentials)."""
    deadline_closes: int = 0
    """Connections closed for sending no request or handshake in time."""
    loop_lag_max: float = 0.0
    """Longest event-loop stall seen (seconds): how long one callback kept everyone waiting."""
    loop_stalls: dict[float, int] = field(default_factory=lambda: dict.fromkeys(STALL_BOUNDS, 0))
    """Stalls longer than each bound (seconds), counted."""


async def probe_lag(counters: Counters, period: float = 0.005) -> None:
    """Sleep ``period`` over and over; oversleeping is time some callback held the loop."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(period)
        lag = loop.time() - before - period
        if lag > counters.loop_lag_max:
            counters.loop_lag_max = lag
        if lag > STALL_BOUNDS[0]:
            for bound in STALL_BOUNDS:
                if lag > bound:
                    counters.loop_stalls[bound] += 1
