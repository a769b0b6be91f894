"""One JetStream consumer per followed subject, every one delivering to a single subscription.

A node holding documents by interest follows one subject per document, thousands of them at
once. nats-py's ordered consumer runs two tasks per subscription (a flow-control check every
quarter second and a heartbeat watch) and the server sends each one heartbeats: measured here,
1,500 held documents took about five times the memory and twice the CPU of the same documents
held without them. So each subject gets a plain ephemeral push consumer (no acks, no flow
control, no heartbeats, kept in memory, removed by the server once nobody listens for
``INACTIVE`` seconds), every one delivering to the same inbox, which this node subscribes to
once (the server delivers a push consumer's messages only to a literal subscription of its
deliver subject, never through a wildcard, and lets consumers share one). A message names its
consumer in its reply subject, and each consumer is named here before it is made, so no
delivery arrives unclaimed. Ordering is checked as an ordered consumer does: a delivery
sequence that skips recreates the consumer from the position the caller has taken.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext

log = logging.getLogger("octosync.cluster.held")

INACTIVE = 60.0
"""Seconds the server keeps a consumer nobody listens to (a node that died)."""


@dataclass(slots=True)
class _Consumer:
    key: str
    subject: str
    position: Callable[[], int]
    name: str
    delivered: int = 0


class DocConsumers:
    """The consumers of one node, by key (a subject-safe token)."""

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext,
        stream: str,
        on_msg: Callable[[str, int, int, Msg], Awaitable[None]],
    ) -> None:
        """``on_msg(key, stream_sequence, pending, msg)`` for each message, in order per key
        (``pending``: how many of the subject's messages the consumer has not delivered yet)."""
        self.nc = nc
        self.js = js
        self.stream = stream
        self.on_msg = on_msg
        self.inbox = nc.new_inbox()
        self._names = self.inbox.rsplit(".", 1)[-1]
        self._consumers: dict[str, _Consumer] = {}
        self._by_name: dict[str, _Consumer] = {}
        self._made = 0
        self.recreated = 0

    def __len__(self) -> int:
        return len(self._consumers)

    async def start(self) -> None:
        await self.nc.subscribe(self.inbox, cb=self._received)

    async def follow(self, key: str, subject: str, position: Callable[[], int]) -> int:
        """Deliver ``subject`` from the sequence after ``position()`` (a consumer this key
        had before is removed); returns how many messages it has to deliver."""
        old = self.let_go(key)
        if old is not None:
            await self._delete(old)
        self._made += 1
        consumer = _Consumer(key, subject, position, f"{self._names}-{self._made}")
        self._consumers[key] = self._by_name[consumer.name] = consumer
        config = api.ConsumerConfig(
            name=consumer.name,
            deliver_subject=self.inbox,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=position() + 1,
            filter_subject=subject,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=INACTIVE,
        )
        try:
            info = await self.js.add_consumer(self.stream, config=config)
        except BaseException:
            if self._consumers.get(key) is consumer:
                self.let_go(key)
            raise
        if self._consumers.get(key) is not consumer:  # let go meanwhile
            await self._delete(consumer.name)
        return int(info.num_pending or 0)

    def let_go(self, key: str) -> str | None:
        """Stop taking ``key``'s messages now; returns its consumer's name for
        :meth:`delete`."""
        consumer = self._consumers.pop(key, None)
        if consumer is None:
            return None
        self._by_name.pop(consumer.name, None)
        return consumer.name

    async def delete(self, name: str) -> None:
        await self._delete(name)

    async def stop_all(self) -> None:
        for key in list(self._consumers):
            name = self.let_go(key)
            if name is not None:
                await self._delete(name)

    async def follow_again(self) -> None:
        """Every consumer again from its position (after NATS came back: the server dropped
        the consumers of a connection away longer than ``INACTIVE``)."""
        for key, consumer in list(self._consumers.items()):
            self.recreated += 1
            with contextlib.suppress(Exception):
                await self.follow(key, consumer.subject, consumer.position)

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(Exception):  # gone already, or NATS away: it expires
            await self.js.delete_consumer(self.stream, name)

    async def _received(self, msg: Msg) -> None:
        try:
            meta = msg.metadata
        except Exception:
            return  # not a stream message
        consumer = self._by_name.get(meta.consumer or "")
        if consumer is None:
            return  # a consumer let go or replaced
        if meta.sequence.consumer != consumer.delivered + 1:
            log.info("cluster: %s skipped a delivery; following it again", consumer.subject)
            self.recreated += 1
            await self.follow(consumer.key, consumer.subject, consumer.position)
            return
        consumer.delivered += 1
        await self.on_msg(consumer.key, int(meta.sequence.stream), int(meta.num_pending), msg)
