"""The chain configuration and link heartbeats in NATS JetStream's key-value store.

One bucket per chain holds ``config`` (MsgPack ``ChainConfig``), written only with
compare-and-set on the entry's revision. A second bucket with a short TTL holds one heartbeat
key per link; a link whose key has expired is presumed dead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from octosync.chain.config import ChainConfig
from octosync.errors import ConfigConflict, ReplicationError
from octosync.links import nats_server
from octosync.wire.strict import strict

CONFIG_KEY = "config"
HEARTBEAT_TTL = 2.0
_decoder = msgspec.msgpack.Decoder(ChainConfig)


class ConfigStore:
    def __init__(self, url: str, chain: str) -> None:
        self.url = url
        self.chain = chain
        self._nc: NatsClient | None = None
        self._config: KeyValue | None = None
        self._beats: KeyValue | None = None

    async def open(self, *, create: bool = True) -> ConfigStore:
        """Connect and open the chain's buckets; ``create=False``: a chain nobody started is
        ``ReplicationError`` instead of new buckets (a relay must not make chains by name)."""
        self._nc = await nats_server.connect(self.url, starts_one="octosync chain up")
        js = self._nc.jetstream()
        try:
            self._config = await _bucket(js, f"chain_{self.chain}", ttl=None, create=create)
            self._beats = await _bucket(
                js, f"chain_{self.chain}_alive", ttl=HEARTBEAT_TTL, create=create
            )
        except BucketNotFoundError:
            await self.close()
            raise ReplicationError(f"no chain {self.chain!r} at {self.url}") from None
        return self

    async def close(self) -> None:
        """Close the client; a server that is already gone is not an error here."""
        if self._nc is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await self._nc.close()

    async def read(self) -> tuple[ChainConfig, int]:
        """The configuration and its revision (``ChainConfig()``, 0 when none was written)."""
        assert self._config is not None
        try:
            entry = await self._config.get(CONFIG_KEY)
        except KeyNotFoundError:
            return ChainConfig(), 0
        if entry.value is None or entry.revision is None:
            return ChainConfig(), 0
        return strict(_decoder.decode, entry.value, dialect="chain/config"), entry.revision

    async def write(self, config: ChainConfig, revision: int) -> int:
        """Compare-and-set: ``ConfigConflict`` if the entry moved past ``revision``."""
        assert self._config is not None
        value = msgspec.msgpack.encode(config)
        try:
            if revision == 0:
                return int(await self._config.create(CONFIG_KEY, value))
            return int(await self._config.update(CONFIG_KEY, value, last=revision))
        except KeyWrongLastSequenceError as exc:
            raise ConfigConflict(f"configuration moved past revision {revision}") from exc
        except Exception as exc:
            if "wrong last sequence" in str(exc):
                raise ConfigConflict(f"configuration moved past revision {revision}") from exc
            raise

    async def change(
        self, step: Callable[[ChainConfig], ChainConfig | None], *, attempts: int = 50
    ) -> ChainConfig:
        """Read, apply ``step`` (None: nothing to do), compare-and-set; retry on conflict."""
        for _ in range(attempts):
            config, revision = await self.read()
            wanted = step(config)
            if wanted is None:
                return config
            try:
                await self.write(wanted, revision)
            except ConfigConflict:
                await asyncio.sleep(0.01)
                continue
            return wanted
        raise ConfigConflict(f"gave up changing the configuration after {attempts} conflicts")

    async def beat(self, member_id: str) -> None:
        assert self._beats is not None
        await self._beats.put(member_id, b"1")

    async def alive(self) -> set[str]:
        assert self._beats is not None
        try:
            return set(await self._beats.keys())
        except Exception:  # nats-py raises NoKeysError when the bucket is empty
            return set()


async def _bucket(js: object, name: str, *, ttl: float | None, create: bool) -> KeyValue:
    key_value: Callable[[str], Awaitable[KeyValue]] = js.key_value  # type: ignore[attr-defined]
    try:
        return await key_value(name)
    except BucketNotFoundError:
        if not create:
            raise
        make = js.create_key_value  # type: ignore[attr-defined]
        bucket: KeyValue = await make(bucket=name, history=1, ttl=ttl)
        return bucket
