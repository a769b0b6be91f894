"""Run effects at most once: ``EffectAuthority.run(key, fire, reconcile)`` under a fenced lease.

The caller names each effect by a stable key (an order id, a message id). ``run``:

1. holds (takes or renews) the lease, whose fencing token it passes to ``fire``;
2. asks the store for the key's record: done already (skip), never tried (record the intent,
   then fire), or in doubt (an earlier holder recorded its intent and no outcome);
3. after ``fire`` returns, records the outcome.

The effect's target takes part, as fencing requires: it keeps the highest token it has seen
and refuses a call with a lower one, so a holder that paused past its term cannot fire late.
An in-doubt effect is never fired blindly: ``reconcile(key, token)`` asks the target whether
the effect happened, and raises the target's fence to ``token`` in the same step, so the
earlier holder, if it is merely slow, can no longer fire it after the answer. Without
``reconcile``, ``EffectInDoubt`` is raised and the key stays in doubt for an operator.
Together: at most once always, exactly once when the target answers ``reconcile``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Protocol

from octosync.effects.ledger import Decision, Lease
from octosync.errors import EffectInDoubt, LeaseLost


class EffectStore(Protocol):
    """Where the lease and the records live: ``store.effects.AsyncJournalEffects`` on one
    node, ``links.effect_kv.NatsEffects`` in a cluster."""

    async def acquire(self, holder: str, ttl: float) -> Lease | None: ...
    async def release(self, lease: Lease) -> None: ...
    async def begin(self, lease: Lease, key: str) -> Decision: ...
    async def retry(self, lease: Lease, key: str) -> None: ...
    async def done(self, lease: Lease, key: str) -> None: ...


class Outcome(Enum):
    FIRED = "fired"
    ALREADY_DONE = "already_done"
    RECONCILED = "reconciled"
    """In doubt, and the target said it had happened: recorded, not fired again."""


Fire = Callable[[int], Awaitable[object]]
"""Fire the effect with this fencing token (the target refuses a token below its highest)."""
Reconcile = Callable[[str, int], Awaitable[bool]]
"""Did the effect with this key happen? The target raises its fence to the token first."""


class EffectAuthority:
    """One holder's side: ``await wait_for_lease()``, then ``await run(key, fire, ...)``."""

    def __init__(self, store: EffectStore, holder: str, *, ttl: float = 5.0) -> None:
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.lease: Lease | None = None

    async def try_lease(self) -> Lease | None:
        self.lease = await self.store.acquire(self.holder, self.ttl)
        return self.lease

    async def wait_for_lease(self, poll: float = 0.05) -> Lease:
        """Until this holder has the lease (another holder's term must end first)."""
        while (lease := await self.try_lease()) is None:
            await asyncio.sleep(poll)
        return lease

    async def _held(self) -> Lease:
        lease = await self.try_lease()  # renews within the term; None: someone else has it
        if lease is None:
            raise LeaseLost(f"{self.holder!r} no longer holds the lease", path="holder")
        return lease

    async def run(self, key: str, fire: Fire, reconcile: Reconcile | None = None) -> Outcome:
        lease = await self._held()
        decision = await self.store.begin(lease, key)
        if decision is Decision.SKIP:
            return Outcome.ALREADY_DONE
        if decision is Decision.IN_DOUBT:
            if reconcile is None:
                raise EffectInDoubt(
                    f"effect {key!r} was about to fire under an earlier holder; "
                    "no reconcile was given to ask its target",
                    path="key",
                )
            if await reconcile(key, lease.token):
                await self.store.done(await self._held(), key)
                return Outcome.RECONCILED
            lease = await self._held()
            await self.store.retry(lease, key)
        await fire(lease.token)
        await self.store.done(lease, key)
        return Outcome.FIRED

    async def release(self) -> None:
        if self.lease is not None:
            await self.store.release(self.lease)
            self.lease = None
