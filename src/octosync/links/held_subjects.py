"""What every holder by interest does over NATS, whatever it holds (shared documents,
``links/cluster_held.py``; TopGun maps, ``links/cluster_held_maps.py``): the stream with a
subject per held thing and room for a consumer per held thing on every node, the key-value
bucket of compacted snapshots, a snapshot written by compare-and-set, and the consumers
followed again after NATS came back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyValueError, NotFoundError
from nats.js.kv import KeyValue

from octosync.cluster.holding import HeldStats, Holdings, HoldTiming
from octosync.links.doc_consumers import DocConsumers
from octosync.links.jetstream_log import LogSettings, ensure_stream

MAX_CONSUMERS = 1 << 20
"""A held stream's consumer limit: one consumer per thing held, per node (the server's
default, 1,000 from nats-server 2.15, would cap what a whole cluster holds)."""
MAX_SNAPSHOT_BYTES = 900 * 1024
"""Below NATS's default 1 MB payload bound, with room for the key-value envelope."""
SNAPSHOT_TAIL = 64
"""Messages of a subject since its snapshot before a holder writes a new one (and once more
when it lets the thing go): a load reads at most about this many after it."""


@dataclass(frozen=True, slots=True)
class HoldSettings:
    """``[cluster]`` settings of what is held by interest (``document_*`` or ``map_*``)."""

    idle: float = 30.0
    """Seconds a document or map with no member stays held."""
    load_timeout: float = 10.0
    """Seconds a load may take."""
    snapshot_interval: float = 10.0
    """Seconds at least between two snapshots of one by this node."""


class Held:
    """What a holder keeps of one thing it loads or holds, whatever its kind: its name, its
    subject token (consumer key and snapshot key), its load and its snapshot's state."""

    def __init__(self, name: str, key: str) -> None:
        self.name = name
        self.key = key
        self.caught_up = asyncio.Event()
        """Set once the consumer delivered every message the subject had (the load's end)."""
        self.load: asyncio.Task[Any] | None = None
        self.snap_revision = 0
        """The key-value revision of the snapshot last read or written here (0: none)."""
        self.snap_at = time.monotonic()
        self.snapping = False


def holdings_for(settings: HoldSettings) -> Holdings:
    """The interest table of one kind, on the monotonic clock."""
    return Holdings(
        time.monotonic, HoldTiming(idle=settings.idle, load_timeout=settings.load_timeout)
    )


async def open_held(
    nc: NatsClient,
    js: JetStreamContext,
    stream: str,
    subject: str,
    bucket: str,
    settings: LogSettings,
    on_msg: Callable[[str, int, int, Msg], Awaitable[None]],
) -> tuple[KeyValue, DocConsumers]:
    """Make the stream and the snapshot bucket (when missing), and start the consumers'
    one subscription."""
    await ensure_stream(
        js, stream, subject, settings.replicas, settings.max_age, max_consumers=MAX_CONSUMERS
    )
    try:
        kv = await js.key_value(bucket)
    except BucketNotFoundError:
        kv = await js.create_key_value(bucket=bucket, history=1, replicas=settings.replicas)
    consumers = DocConsumers(nc, js, stream, on_msg)
    await consumers.start()
    return kv, consumers


async def read_entry(kv: KeyValue, key: str) -> tuple[int, bytes] | None:
    """A snapshot's revision and bytes, or None when there is none."""
    try:
        entry = await kv.get(key)
    except (NotFoundError, KeyValueError):
        return None
    if not entry.value:
        return None
    return int(entry.revision or 0), entry.value


async def follow_to_end(
    consumers: DocConsumers, held: Held, subject: str, position: Callable[[], int]
) -> int:
    """Follow ``subject`` from the sequence after ``position()`` until the consumer delivered
    every message it had then (the caller bounds the wait); returns how many that was."""
    pending = await consumers.follow(held.key, subject, position)
    if not pending:
        held.caught_up.set()
    await held.caught_up.wait()
    return pending


async def write_snapshot(
    kv: KeyValue,
    key: str,
    data: bytes,
    revision: int,
    position: int,
    theirs: Callable[[], Awaitable[tuple[int, int] | None]],
    stats: HeldStats,
) -> tuple[int, bool]:
    """Compare-and-set on ``revision`` (0: none known); when another holder wrote since, its
    snapshot (``theirs()``: its revision and position) is replaced only if it covers less of
    the subject. Returns the revision known now and whether the state is covered (written,
    too large to write, or a newer one there)."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        stats.snapshots_too_large += 1
        return revision, True
    for _ in range(3):
        try:
            if revision:
                revision = await kv.update(key, data, last=revision)
            else:
                revision = await kv.create(key, data)
            stats.snapshots += 1
            return revision, True
        except KeyValueError:
            found = await theirs()
            if found is None:
                revision = 0
                continue
            revision = found[0]
            if found[1] >= position:
                stats.snapshot_conflicts += 1
                return revision, True
    return revision, False


class Reconnects:
    """After NATS came back, every consumer is followed again from where it got (the server
    drops a consumer nobody listened to for ``doc_consumers.INACTIVE`` seconds)."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.seen = self._count()

    def _count(self) -> int:
        return int(self.nc.stats.get("reconnects", 0))

    async def follow_again(self, consumers: DocConsumers) -> None:
        count = self._count()
        if count != self.seen:
            self.seen = count
            await consumers.follow_again()


def stop_following(consumers: DocConsumers | None, key: str) -> Coroutine[Any, Any, None] | None:
    """Stop taking ``key``'s messages now; the deletion of its consumer to run (or None)."""
    if consumers is None:
        return None
    name = consumers.let_go(key)
    return None if name is None else consumers.delete(name)


async def stop_all(consumers: DocConsumers | None, grace: float) -> None:
    """Remove every consumer (at most ``grace`` seconds: those left expire on the server)."""
    if consumers is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(consumers.stop_all(), grace)
