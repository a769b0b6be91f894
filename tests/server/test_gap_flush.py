"""A fan-out runs at the end of the turn when idle, once however often it is asked for, and
not again within its gap."""

from __future__ import annotations

import asyncio

from octosync.server.gap_flush import GapFlush


async def test_idle_runs_at_the_turns_end_once_then_waits_for_the_gap() -> None:
    runs: list[int] = []
    flush = GapFlush(lambda: runs.append(len(runs)), gap=3600.0)
    for _ in range(3):
        flush.soon()
    assert runs == []  # not inline: at the end of this turn
    await asyncio.sleep(0)
    assert runs == [0]  # once for the three requests
    flush.soon()
    for _ in range(5):
        await asyncio.sleep(0)
    assert runs == [0]  # within the gap: waits


async def test_without_a_gap_every_turn_may_flush() -> None:
    runs: list[int] = []
    flush = GapFlush(lambda: runs.append(len(runs)), gap=0.0)
    flush.soon()
    await asyncio.sleep(0)
    flush.soon()
    await asyncio.sleep(0)
    assert runs == [0, 1]
