"""The configuration in NATS JetStream KV: compare-and-set, concurrent changes, heartbeats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from octosync.chain.config import ChainConfig, Member
from octosync.errors import ConfigConflict, ReplicationError
from octosync.links.config_store import ConfigStore

A, B = Member("a", "127.0.0.1", 1), Member("b", "127.0.0.1", 2)


@pytest.fixture
async def store(nats_url: str) -> AsyncIterator[ConfigStore]:
    configs = await ConfigStore(nats_url, "t").open()
    try:
        yield configs
    finally:
        await configs.close()


async def test_compare_and_set_refuses_a_stale_revision(store: ConfigStore) -> None:
    assert await store.read() == (ChainConfig(), 0)
    first = await store.write(ChainConfig((A,), 1), 0)
    with pytest.raises(ConfigConflict):
        await store.write(ChainConfig((B,), 1), 0)
    await store.write(ChainConfig((A, B), 2), first)
    with pytest.raises(ConfigConflict):
        await store.write(ChainConfig((B,), 3), first)
    assert (await store.read())[0] == ChainConfig((A, B), 2)


async def test_concurrent_changes_all_land(store: ConfigStore) -> None:
    members = [Member(f"m{i}", "127.0.0.1", i) for i in range(8)]
    await asyncio.gather(*(store.change(lambda c, m=m: c.with_tail(m)) for m in members))
    config, _ = await store.read()
    assert sorted(config.ids()) == sorted(m.id for m in members)
    assert config.epoch == 8


async def test_heartbeats_list_alive_links(store: ConfigStore) -> None:
    assert await store.alive() == set()
    await store.beat("a")
    assert await store.alive() == {"a"}


async def test_no_nats_there_is_one_error_in_bounded_time() -> None:
    from octosync.links import nats_server
    from tests.e2e.helpers import free_port

    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ReplicationError, match="octosync chain up"):
        await nats_server.connect(
            f"nats://127.0.0.1:{free_port()}", timeout=0.5, starts_one="octosync chain up"
        )
    assert loop.time() - start < 3.0
