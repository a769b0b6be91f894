"""The effect authority over a real NATS server's key-value store (the cluster's store)."""

from __future__ import annotations

import asyncio

import pytest

from octosync.client.effects import EffectAuthority, Outcome
from octosync.effects.ledger import Decision, State
from octosync.errors import LeaseLost
from octosync.links.effect_kv import NatsEffects


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Target:
    """An effect's target that keeps the highest token it saw (fencing)."""

    def __init__(self) -> None:
        self.fence = 0
        self.fired: list[tuple[str, int]] = []

    def _raise(self, token: int) -> None:
        if token < self.fence:
            raise PermissionError(f"token {token} < {self.fence}")
        self.fence = token

    async def fire(self, key: str, token: int) -> None:
        self._raise(token)
        self.fired.append((key, token))

    async def happened(self, key: str, token: int) -> bool:
        self._raise(token)
        return any(k == key for k, _ in self.fired)


@pytest.mark.slow
async def test_one_of_many_takes_the_lease_and_a_stale_holder_is_fenced(nats_url: str) -> None:
    clock = Clock()
    stores = [await NatsEffects(nats_url, "t1", clock=clock).open() for _ in range(5)]
    try:
        got = await asyncio.gather(*(s.acquire(f"n{i}", 5.0) for i, s in enumerate(stores)))
        winners = [lease for lease in got if lease is not None]
        assert len(winners) == 1
        a = winners[0]
        a_store = stores[got.index(a)]
        assert await a_store.begin(a, "k") is Decision.FIRE
        clock.now += 6.0
        other = next(s for s in stores if s is not a_store)
        b = await other.acquire("late", 5.0)
        assert b is not None
        assert b.token == a.token + 1
        with pytest.raises(LeaseLost):
            await a_store.done(a, "k")
        assert await other.begin(b, "k") is Decision.IN_DOUBT
        await other.retry(b, "k")
        await other.done(b, "k")
        assert await other.begin(b, "k") is Decision.SKIP
        assert await other.count(State.DONE) == 1
    finally:
        for s in stores:
            await s.close()


@pytest.mark.slow
async def test_three_holders_race_over_effects_while_holders_crash(nats_url: str) -> None:
    """A holder's task is cancelled mid-effect (it never records its outcome) twice; the
    others take over and every effect reaches the target exactly once."""
    count = 150
    target = Target()
    stores = [await NatsEffects(nats_url, "race").open() for _ in range(3)]
    progress = asyncio.Event()

    async def replica(i: int) -> None:
        authority = EffectAuthority(stores[i], f"r{i}", ttl=0.3)
        while await stores[i].count(State.DONE) < count:
            await authority.wait_for_lease(poll=0.02)
            try:
                for n in range(count):
                    key = f"e{n}"

                    async def fire(token: int, key: str = key) -> None:
                        await target.fire(key, token)
                        progress.set()
                        await asyncio.sleep(0)  # a cancel may land here: fired, not recorded

                    outcome = await authority.run(key, fire, target.happened)
                    assert outcome in (Outcome.FIRED, Outcome.ALREADY_DONE, Outcome.RECONCILED)
            except LeaseLost:
                continue

    tasks = {i: asyncio.create_task(replica(i)) for i in range(3)}
    crashed = 0
    try:
        for _ in range(2):
            for _ in range(20):
                progress.clear()
                await asyncio.wait_for(progress.wait(), 30)
            lease = await stores[0].lease()
            assert lease is not None
            victim = tasks[int(lease.holder[1:])]
            while not victim.done():  # nats-py may swallow one cancel inside its own waits
                victim.cancel()
                await asyncio.sleep(0.001)
            crashed += 1
        await asyncio.wait_for(asyncio.gather(*(t for t in tasks.values() if not t.done())), 120)
    finally:
        for t in tasks.values():
            t.cancel()
        for s in stores:
            await s.close()
    keys = [k for k, _ in target.fired]
    assert crashed == 2
    assert sorted(keys) == sorted(f"e{n}" for n in range(count))
