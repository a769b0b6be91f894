"""One replica racing for the effect lease (run as a subprocess by test_effects_race.py).

    python tests/e2e/effect_worker.py DATA SINK HOLDER COUNT

It waits for the lease, then runs effects ``e0 .. e{COUNT-1}`` in order; an effect appends
``key token`` to the SINK log. The sink is the effect's target: it keeps the highest fencing
token it saw and refuses calls with a lower one, and answers whether a key happened
(``reconcile``). On ``LeaseLost`` the worker waits for the lease again. It exits when every
effect is recorded done.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
from pathlib import Path

from octosync.client.effects import EffectAuthority
from octosync.effects.ledger import State
from octosync.errors import LeaseLost
from octosync.store.effects import AsyncJournalEffects, JournalEffects


class Refused(Exception):
    pass


class Sink:
    def __init__(self, folder: Path) -> None:
        self.lock = folder / "lock"
        self.log = folder / "log"
        self.fence = folder / "fence"
        self.lock.touch()

    async def fire(self, key: str, token: int) -> None:
        with self.lock.open("r+") as fd:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._raise_fence(token)
            with self.log.open("a") as log:
                log.write(f"{key} {token}\n")

    async def happened(self, key: str, token: int) -> bool:
        """Whether ``key`` fired; from now on tokens below ``token`` are refused."""
        with self.lock.open("r+") as fd:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._raise_fence(token)
            if not self.log.exists():
                return False
            return any(line.split()[0] == key for line in self.log.read_text().splitlines())

    def _raise_fence(self, token: int) -> None:
        highest = int(self.fence.read_text()) if self.fence.exists() else 0
        if token < highest:
            raise Refused(f"token {token} < {highest}")
        tmp = self.fence.with_suffix(".tmp")
        tmp.write_text(str(token))
        os.replace(tmp, self.fence)  # a kill -9 here leaves the old fence or the new one


async def main(data: Path, sink_dir: Path, holder: str, count: int) -> None:
    records = JournalEffects(data, durability="normal")
    store = AsyncJournalEffects(records)
    sink = Sink(sink_dir)
    authority = EffectAuthority(store, holder, ttl=0.3)
    while records.count(State.DONE) < count:
        await authority.wait_for_lease(poll=0.02)
        try:
            for i in range(count):
                key = f"e{i}"
                await authority.run(
                    key, lambda token, key=key: sink.fire(key, token), sink.happened
                )
        except LeaseLost:
            continue
    records.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
