"""A JetStream stream used as the cluster's op log: made once, published to with retries,
followed by an ordered consumer from a position. :class:`OpLogLink` is the half that TopGun
maps (``links/cluster_maps.py``) and shared documents (``links/cluster_planes.py``) share: they
differ only in what their messages hold, how a node applies them and how it repairs them."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from octosync.errors import InternalError, OctosyncError

log = logging.getLogger("octosync.cluster")

ATTEMPT_TIMEOUT = 2.0
"""Seconds one publish waits for JetStream's ack before it is sent again."""
REQUEST_TIMEOUT = 2.0
"""Seconds an anti-entropy request waits for the peer's answer."""
SILENT_AFTER = 5.0
"""Seconds without a message (or the consumer's heartbeat) before the stream is checked."""


@dataclass(frozen=True, slots=True)
class StreamSpan:
    """What a stream holds when a node opens it: sequences ``first`` to ``last`` (``last`` is 0
    when it holds no message: a purge keeps the sequence numbers)."""

    first: int
    last: int

    def lost_after(self, position: int) -> int:
        """How many sequences past ``position`` the stream no longer holds (its age limit or a
        purge removed them before this node took them): anti-entropy has to bring them."""
        return max(0, self.first - 1 - position)


DUPLICATE_WINDOW = 120.0
"""Seconds JetStream remembers a ``Nats-Msg-Id`` (its default), never past the age limit."""


async def ensure_stream(
    js: JetStreamContext,
    name: str,
    subject: str,
    replicas: int,
    max_age: float,
    max_consumers: int | None = None,
) -> StreamSpan:
    """Make the stream if it does not exist, with messages kept ``max_age`` seconds; an existing
    stream with another age limit is given this one (the op log is not the record of truth:
    every node journals what it takes, and anti-entropy repairs what a node never read).
    ``max_consumers``: the stream's consumer limit, when the server's default (1,000 from
    nats-server 2.15) is too low."""
    window = min(DUPLICATE_WINDOW, max_age)
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        info = await js.add_stream(
            name=name,
            subjects=[subject],
            num_replicas=replicas,
            storage=api.StorageType.FILE,
            max_age=max_age,
            duplicate_window=window,
            max_consumers=max_consumers or -1,
        )
    stale = max_consumers is not None and info.config.max_consumers != max_consumers
    if info.config.max_age != max_age or stale:
        config = replace(info.config, max_age=max_age, duplicate_window=window)
        if max_consumers is not None:
            config = replace(config, max_consumers=max_consumers)
        info = await js.update_stream(config)
    if (info.config.num_replicas or 1) != replicas:
        log.warning(
            "cluster: the stream %s has %s replicas, not the %s configured here",
            name,
            info.config.num_replicas,
            replicas,
        )
    if not info.state.messages:
        return StreamSpan(first=int(info.state.first_seq or 1), last=0)
    return StreamSpan(first=int(info.state.first_seq or 1), last=int(info.state.last_seq or 0))


async def publish_stored(
    js: JetStreamContext,
    subject: str,
    data: bytes,
    msg_id: str,
    timeout: float,
    on_retry: Callable[[], None],
) -> bool:
    """Publish until JetStream acknowledges storing it (True) or ``timeout`` passes (False).
    Every attempt carries the same ``Nats-Msg-Id``, so JetStream stores it once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            future = await js.publish_async(
                subject, data, headers={"Nats-Msg-Id": msg_id}, wait_stall=ATTEMPT_TIMEOUT
            )
            await asyncio.wait_for(future, ATTEMPT_TIMEOUT)
            return True
        except (nats.errors.Error, TimeoutError) as exc:
            if loop.time() >= deadline:
                log.warning("cluster: a batch on %s was not stored: %s", subject, exc)
                return False
            on_retry()
            await asyncio.sleep(0.1)


class Follower:
    """An ordered consumer of ``subject`` in ``stream`` from a position, recreated when it
    stays silent while the stream moved past that position."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        subject: str,
        on_msg: Callable[[Msg], Awaitable[None]],
    ) -> None:
        self.js = js
        self.stream = stream
        self.subject = subject
        self._on_msg = on_msg
        self._sub: Any = None
        self.last_in = time.monotonic()
        self.resubscribed = 0

    async def follow(self, after: int) -> None:
        """Subscribe from the sequence after ``after``."""
        await self.stop()
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1
        )
        self._sub = await self.js.subscribe(
            self.subject,
            stream=self.stream,
            cb=self._received,
            ordered_consumer=True,
            idle_heartbeat=1.0,
            config=config,
        )
        self.last_in = time.monotonic()

    async def _received(self, msg: Msg) -> None:
        self.last_in = time.monotonic()
        await self._on_msg(msg)

    async def watchdog(self, position: int) -> None:
        """The ordered consumer recreates itself when NATS comes back; should it stay silent
        while the stream moved past ``position``, follow it again from there."""
        if time.monotonic() - self.last_in < SILENT_AFTER:
            return
        try:
            info = await self.js.stream_info(self.stream)
        except Exception:
            return
        if int(info.state.last_seq or 0) > position:
            self.resubscribed += 1
            await self.follow(position)
        else:
            self.last_in = time.monotonic()

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None


async def wait_caught_up(position: Callable[[], int], last: int, timeout: float) -> bool:
    """Wait until ``position()`` reaches ``last`` or ``timeout`` passes; True when it did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while position() < last and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return position() >= last


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``[cluster]`` settings of the op logs (``server.config``: the ``map_*`` keys, which
    govern TopGun maps and shared documents alike)."""

    replicas: int = 1
    """JetStream replicas of the op stream (1 for a single NATS server)."""
    sync_interval: float = 30.0
    """Seconds between anti-entropy rounds."""
    settle: float = 2.0
    """A map or document written within this many seconds is left out of a round."""
    replicate_timeout: float = 30.0
    """Seconds a batch may take to be stored in JetStream before its writers are reset."""
    catch_up_timeout: float = 30.0
    """Seconds a starting node waits to replay the op stream before it opens its port."""
    max_age: float = 7 * 86400.0
    """Seconds JetStream keeps an op stream message; a node that was away longer is repaired
    by anti-entropy instead of the replay."""


@dataclass(slots=True)
class Waiter:
    """A writer's batch: ``then`` once every message holding it is stored; ``conn`` is reset
    if one is not."""

    conn: int
    then: Callable[[], None] | None
    pending: int = 0
    failed: bool = False


class LogCounts(Protocol):
    """The counters the shared half keeps (``cluster.maps.MapStats`` and the planes' own)."""

    published: int
    republished: int
    failed: int
    resubscribed: int
    unreplayed: int


class OpLogLink:
    """What both op-log links do: open the stream and catch up, publish with retries and
    release or reset the waiting writers, run a round every half second, stop."""

    stats: LogCounts

    def __init__(self, node: str, settings: LogSettings, stream: str, subject: str) -> None:
        self.node = node
        self.settings = settings
        self.log_stream = stream
        self.log_subject = subject
        self.boot = f"{node}-{os.getpid()}-{time.time_ns():x}"
        """This process's name on its batches: it skips its own, never those of an earlier
        run of this node (their ops may have been stored before that run's journal had them)."""
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._follower: Follower | None = None
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- what each link says --------------------------------------------------------------------

    @property
    def position(self) -> int:
        raise NotImplementedError

    async def _on_batch(self, msg: Msg) -> None:
        raise NotImplementedError

    async def _round(self) -> None:
        """The periodic work besides the watchdog (anti-entropy)."""
        raise NotImplementedError

    def _fault(self, conn: int, err: OctosyncError) -> None:
        raise NotImplementedError

    # --- lifecycle ------------------------------------------------------------------------------

    async def _open(
        self, nc: NatsClient, handlers: Mapping[str, Callable[[Msg], Awaitable[None]]]
    ) -> None:
        """Make sure the stream exists, subscribe ``handlers`` (plain NATS), replay the stream
        from ``position`` (bounded by ``catch_up_timeout``), then follow it and run rounds."""
        self._nc = nc
        js = self._js = nc.jetstream()
        span = await ensure_stream(
            js, self.log_stream, self.log_subject, self.settings.replicas, self.settings.max_age
        )
        lost = span.lost_after(self.position)
        if lost:
            self.stats.unreplayed += lost
            log.warning(
                "cluster: %s no longer holds %d messages after %d; anti-entropy brings them",
                self.log_stream,
                lost,
                self.position,
            )
        for subject, handler in handlers.items():
            await nc.subscribe(subject, cb=handler)
        self._follower = Follower(js, self.log_stream, self.log_subject, self._on_batch)
        await self._follower.follow(self.position)
        last = span.last
        if not await wait_caught_up(lambda: self.position, last, self.settings.catch_up_timeout):
            log.warning(
                "cluster: caught up with %s only to %d of %d before serving",
                self.log_stream,
                self.position,
                last,
            )
        self._spawn(self._ticker())

    async def stop(self, grace: float = 2.0) -> None:
        """Give publishes in flight ``grace`` seconds to be stored, then stop everything."""
        publishing = [t for t in self._tasks if t.get_name() == "publish"]
        if publishing:
            await asyncio.wait(publishing, timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._follower is not None:
            await self._follower.stop()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ticker(self) -> None:
        step = min(0.5, self.settings.sync_interval)
        while True:
            await asyncio.sleep(step)
            try:
                if self._follower is not None:
                    await self._follower.watchdog(self.position)
                    self.stats.resubscribed = self._follower.resubscribed
                await self._round()
            except Exception:  # one bad round must not stop the next
                log.exception("cluster: a round of %s failed", self.log_stream)

    # --- anti-entropy ---------------------------------------------------------------------------

    async def _pull(
        self,
        subject: str,
        first: Callable[[], bytes],
        step: Callable[[bytes], bytes | None],
        what: str,
        done: Callable[[], None],
    ) -> None:
        """One anti-entropy walk with a peer, whatever it pulls (maps by their Merkle trees,
        documents by their digests): ``first()`` and each request after it go to the peer's
        ``subject``, ``step`` takes the answer (folds what came) and gives the next request, or
        None at the end; a peer that does not answer in time ends it, and ``done`` is called
        either way."""
        assert self._nc is not None
        try:
            request: bytes | None = first()
            while request is not None:
                reply = await self._nc.request(subject, request, timeout=REQUEST_TIMEOUT)
                request = step(reply.data)
        except (OctosyncError, nats.errors.Error, TimeoutError) as exc:
            log.info("cluster: repair of %s stopped: %s", what, exc)
        finally:
            done()

    # --- publishing -----------------------------------------------------------------------------

    def _send(self, subject: str, data: bytes, waiters: list[Waiter]) -> None:
        """Publish ``data`` (each of ``waiters`` counts it as pending already)."""
        msg_id = f"{self.boot}-{next(self._ids)}"
        self._spawn(self._publish(subject, data, msg_id, waiters), "publish")

    async def _publish(self, subject: str, data: bytes, msg_id: str, waiters: list[Waiter]) -> None:
        assert self._js is not None
        stored = await publish_stored(
            self._js, subject, data, msg_id, self.settings.replicate_timeout, self._retried
        )
        if not stored:
            self.stats.failed += 1
            for w in waiters:
                if not w.failed:
                    w.failed = True
                    self._fault(w.conn, InternalError("the cluster did not store a write in time"))
            return
        self.stats.published += 1
        for w in waiters:
            w.pending -= 1
            if w.pending == 0 and not w.failed and w.then is not None:
                w.then()

    def _retried(self) -> None:
        self.stats.republished += 1
