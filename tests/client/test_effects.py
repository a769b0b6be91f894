"""EffectAuthority's outcomes over the journal store: fire once, skip, reconcile, in doubt."""

from __future__ import annotations

from pathlib import Path

import pytest

from octosync.client.effects import EffectAuthority, Outcome
from octosync.errors import EffectInDoubt, LeaseLost
from octosync.store.effects import AsyncJournalEffects, JournalEffects


async def test_fire_skip_and_the_in_doubt_paths(tmp_path: Path) -> None:
    fired: list[tuple[str, int]] = []

    def firing(key: str):  # type: ignore[no-untyped-def]
        async def fire(token: int) -> None:
            fired.append((key, token))

        return fire

    records = JournalEffects(tmp_path)
    store = AsyncJournalEffects(records)
    first = EffectAuthority(store, "first", ttl=60)
    await first.wait_for_lease()
    assert await first.run("mail-1", firing("mail-1")) is Outcome.FIRED
    assert await first.run("mail-1", firing("mail-1")) is Outcome.ALREADY_DONE
    lease = first.lease
    assert lease is not None
    records.begin(lease, "mail-2")  # recorded the intent, then "crashed"
    records.begin(lease, "mail-3")
    await first.release()

    second = EffectAuthority(store, "second", ttl=60)
    await second.wait_for_lease()
    with pytest.raises(EffectInDoubt):
        await second.run("mail-2", firing("mail-2"))

    fences: list[int] = []

    async def happened(key: str, token: int) -> bool:
        fences.append(token)
        return key == "mail-2"

    assert await second.run("mail-2", firing("mail-2"), happened) is Outcome.RECONCILED
    assert await second.run("mail-3", firing("mail-3"), happened) is Outcome.FIRED
    assert [k for k, _ in fired] == ["mail-1", "mail-3"]
    assert [t for _, t in fired] == [1, 2]
    assert fences == [2, 2]  # the target was told the new term's token before answering

    first_again = EffectAuthority(store, "first", ttl=60)
    with pytest.raises(LeaseLost):
        await first_again.run("mail-4", firing("mail-4"))
    records.close()
