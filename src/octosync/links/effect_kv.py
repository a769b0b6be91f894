"""The effect authority's lease and records in NATS JetStream key-value, for a cluster.

One bucket per lease name. ``lease`` holds ``{holder, token, expires}``; every change to it is
a compare-and-set on the entry's revision, so of two nodes that read the same lease only one
starts the next term (the other's write fails and it reads again). ``effect.<key>`` holds
``{state, token}``, created only if absent (the intent) and then updated by compare-and-set.
Key-value has no transaction across keys, so the record write cannot also check the lease:
a holder checks its term just before, and the effect's target closes the remaining window
(it refuses tokens below the highest it has seen, and ``reconcile`` raises that fence before
it answers), as ``client.effects`` requires of every target. Times are the nodes' wall
clocks; their skew must stay well below the lease's TTL.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Callable

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from octosync.effects.ledger import Decision, Lease, State, acquire, check_held, decide
from octosync.errors import LeaseLost, StorageError
from octosync.links import nats_server
from octosync.links.config_store import _bucket
from octosync.wire.strict import strict

LEASE_KEY = "lease"


class _Lease(msgspec.Struct, frozen=True):
    holder: str
    token: int
    expires: float


class _Record(msgspec.Struct, frozen=True):
    state: str
    token: int


_lease_decoder = msgspec.json.Decoder(_Lease)
_record_decoder = msgspec.json.Decoder(_Record)


def _record_key(key: str) -> str:
    """Effect keys are the caller's words: base32 keeps them within NATS's key alphabet."""
    return "effect." + base64.b32encode(key.encode()).decode().rstrip("=")


class NatsEffects:
    """``client.effects.EffectStore`` over one NATS key-value bucket."""

    def __init__(self, url: str, name: str = "effects", *, clock: Callable[[], float] = time.time):
        self.url = url
        self.name = name
        self.clock = clock
        self._nc: NatsClient | None = None
        self._kv: KeyValue | None = None

    async def open(self) -> NatsEffects:
        self._nc = await nats_server.connect(self.url, starts_one="octosync cluster up")
        self._kv = await _bucket(
            self._nc.jetstream(), f"effects_{self.name}", ttl=None, create=True
        )
        return self

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await self._nc.close()

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "open() first"
        return self._kv

    async def _read_lease(self) -> tuple[Lease | None, int]:
        try:
            entry = await self.kv.get(LEASE_KEY)
        except KeyNotFoundError:
            return None, 0
        if entry.value is None or entry.revision is None:
            return None, 0
        raw = strict(_lease_decoder.decode, entry.value, dialect="effects/lease")
        return Lease(raw.holder, raw.token, raw.expires), entry.revision

    async def _cas(self, key: str, value: bytes, revision: int) -> bool:
        try:
            if revision == 0:
                await self.kv.create(key, value)
            else:
                await self.kv.update(key, value, last=revision)
        except KeyWrongLastSequenceError:
            return False
        except Exception as exc:  # nats-py raises a plain APIError for "key exists"
            if "wrong last sequence" in str(exc) or "key exists" in str(exc):
                return False
            raise StorageError(f"the effect store could not write {key!r}: {exc}") from exc
        return True

    async def lease(self) -> Lease | None:
        return (await self._read_lease())[0]

    async def acquire(self, holder: str, ttl: float) -> Lease | None:
        for _ in range(20):
            current, revision = await self._read_lease()
            new = acquire(current, holder, ttl, self.clock())
            if new is None:
                return None
            value = msgspec.json.encode(_Lease(new.holder, new.token, new.expires))
            if await self._cas(LEASE_KEY, value, revision):
                return new
        return None  # lost every race: someone else is busy taking it

    async def release(self, lease: Lease) -> None:
        current, revision = await self._read_lease()
        if current is not None and current.token == lease.token:
            value = msgspec.json.encode(_Lease(lease.holder, lease.token, 0.0))
            await self._cas(LEASE_KEY, value, revision)

    async def _check(self, lease: Lease) -> None:
        check_held((await self._read_lease())[0], lease, self.clock())

    async def _read_record(self, key: str) -> tuple[_Record | None, int]:
        try:
            entry = await self.kv.get(_record_key(key))
        except KeyNotFoundError:
            return None, 0
        if entry.value is None or entry.revision is None:
            return None, 0
        return strict(_record_decoder.decode, entry.value, dialect="effects/record"), entry.revision

    async def begin(self, lease: Lease, key: str) -> Decision:
        await self._check(lease)
        record, _ = await self._read_record(key)
        decision = decide(None if record is None else State(record.state))
        if decision is not Decision.FIRE:
            return decision
        intent = msgspec.json.encode(_Record(State.INTENT.value, lease.token))
        if await self._cas(_record_key(key), intent, 0):
            return Decision.FIRE
        record, _ = await self._read_record(key)  # another holder recorded it meanwhile
        return decide(None if record is None else State(record.state))

    async def retry(self, lease: Lease, key: str) -> None:
        await self._write(lease, key, State.INTENT)

    async def done(self, lease: Lease, key: str) -> None:
        await self._write(lease, key, State.DONE)

    async def _write(self, lease: Lease, key: str, state: State) -> None:
        await self._check(lease)
        record, revision = await self._read_record(key)
        if record is not None and record.token > lease.token:
            raise LeaseLost(
                f"effect {key!r} was recorded under a later token {record.token}", path="token"
            )
        value = msgspec.json.encode(_Record(state.value, lease.token))
        if not await self._cas(_record_key(key), value, revision):
            raise LeaseLost(f"effect {key!r} changed under another holder", path="token")

    async def count(self, state: State) -> int:
        n = 0
        try:
            keys = await self.kv.keys()
        except Exception:  # nats-py raises NoKeysError for an empty bucket
            return 0
        for k in keys:
            if not k.startswith("effect."):
                continue
            entry = await self.kv.get(k)
            if entry.value is not None and _record_decoder.decode(entry.value).state == state.value:
                n += 1
        return n
