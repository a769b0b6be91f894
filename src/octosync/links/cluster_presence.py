"""Presence and awareness across the cluster's nodes, over core NATS (never JetStream).

A member's presence reaches the members of the same document on every other node: each node
publishes the values its own connections set or end (``hub.presence``), at most once per
presence flush, on the document's subject (``wire/cluster_presence.py``), and follows a
document's subject only while its own connections are members of it. Other nodes' values are
held as those of a remote connection, one per node, under the same TTL: a node that dies
(``kill -9``) takes its members' presence with it within one TTL, ended on each node by that
node itself. Nothing here is acknowledged or stored: presence is as live as the connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from octosync.cluster.holding import token
from octosync.errors import OctosyncError
from octosync.hub.types import ConnId
from octosync.ipc.messages import CrdtOp
from octosync.wire import cluster_presence as wire

log = logging.getLogger("octosync.cluster.presence")
MAX_NODES = 4096
"""Other nodes' names remembered (each a remote connection id); past it, messages of a node
not yet seen are dropped."""


class PresenceHost(Protocol):
    """What the link uses of the plane (``server.plane.Plane``)."""

    def merge_presence(self, node: ConnId, stream: str, ops: Sequence[CrdtOp]) -> None: ...

    def local_presence(self, stream: str) -> tuple[CrdtOp, ...]: ...


class PresenceLink:
    """Carries one node's presence and awareness values to the other nodes' members."""

    def __init__(self, host: PresenceHost, node: str, *, cluster: str) -> None:
        self.host = host
        self.node = node
        self.prefix = f"octosync.{cluster}.presence."
        self._nc: NatsClient | None = None
        self._subs: dict[str, Subscription | None] = {}
        """Documents followed (``None`` while the subscription is being made)."""
        self._nodes: dict[str, ConnId] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0
        self.received = 0
        self.undecodable = 0

    def subject(self, stream: str) -> str:
        return self.prefix + token(stream)

    async def start(self, nc: NatsClient) -> None:
        self._nc = nc
        for stream in list(self._subs):  # members that joined before the cluster connection
            self._subs.pop(stream, None)
            self.follow(stream)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sub in self._subs.values():
            if sub is not None:
                await _quietly(sub.unsubscribe())
        self._subs.clear()
        self._nc = None

    # --- the plane's side -----------------------------------------------------------------------

    def follow(self, stream: str) -> None:
        """This node's connections read ``stream``: take other nodes' values of it (and ask
        them for those they hold now)."""
        if stream in self._subs:
            return
        self._subs[stream] = None
        if self._nc is not None:
            self._spawn(self._subscribe(stream))

    def unfollow(self, stream: str) -> None:
        """None of this node's connections reads ``stream`` any more."""
        if stream not in self._subs:
            return
        sub = self._subs.pop(stream)
        if sub is not None:
            self._spawn(_quietly(sub.unsubscribe()))

    def publish(self, stream: str, ops: Sequence[CrdtOp]) -> None:
        """Values this node's connections set or ended (the plane's presence flush)."""
        if self._nc is None or not ops:
            return
        for at in range(0, len(ops), wire.MAX_OPS):
            chunk = list(ops[at : at + wire.MAX_OPS])
            data = wire.encode(wire.PresenceOps(self.node, stream, chunk))
            self._spawn(self._send(self.subject(stream), data))

    # --- NATS -----------------------------------------------------------------------------------

    async def _subscribe(self, stream: str) -> None:
        nc = self._nc
        if nc is None:
            return
        sub = await nc.subscribe(self.subject(stream), cb=self._on_message)
        if stream not in self._subs:  # unfollowed while subscribing
            await _quietly(sub.unsubscribe())
            return
        self._subs[stream] = sub
        await self._send(self.subject(stream), wire.encode(wire.PresenceAsk(self.node, stream)))

    async def _send(self, subject: str, data: bytes) -> None:
        if self._nc is None:
            return
        try:
            await self._nc.publish(subject, data)
            self.sent += 1
        except nats.errors.Error as exc:  # presence is as live as the link: the next one goes
            log.info("cluster: presence not sent: %s", exc)

    async def _on_message(self, msg: Msg) -> None:
        try:
            message = wire.decode(msg.data)
        except OctosyncError as exc:
            self.undecodable += 1
            log.warning("cluster: an undecodable presence message: %s", exc)
            return
        if message.node == self.node or message.stream not in self._subs:
            return
        self.received += 1
        if isinstance(message, wire.PresenceAsk):
            self.publish(message.stream, self.host.local_presence(message.stream))
            return
        conn = self._remote(message.node)
        if conn is not None:
            self.host.merge_presence(conn, message.stream, message.ops)

    def _remote(self, node: str) -> ConnId | None:
        """The negative connection id standing for ``node``'s connections."""
        conn = self._nodes.get(node)
        if conn is None and len(self._nodes) < MAX_NODES:
            conn = self._nodes[node] = -1 - len(self._nodes)
        return conn

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _quietly(work: Coroutine[Any, Any, None]) -> None:
    try:
        await work
    except (nats.errors.Error, OSError) as exc:
        log.info("cluster: presence unsubscribe failed: %s", exc)
