"""One chain link as a process: the ``ChainLink`` core behind TCP, SQLite and NATS.

Everything that changes the replica happens in one task (``_process``), one batch at a time:
take every queued input, feed it to the cores, commit what changed to SQLite in one
transaction (group commit), and only then write the outputs to sockets, one write per
connection per batch. So nothing is forwarded or acknowledged that a crash could take back.
Acknowledgements relayed from downstream are the one exception (``flush_relayed``): they
report commits already made, here and below, so they leave before this batch's commit.
The commit runs on the loop's own thread: it is one fsync (about 2 ms here), and handing it
to a worker thread cost more (two thread switches per batch on a busy 2-core machine) than
the reading it let overlap; the kernel buffers what arrives meanwhile.

Membership (neighbours, fencing by epoch, who is probed or removed) is decided by the
sans-I/O ``chain.membership.Membership``; this module only moves bytes: it reads frames,
feeds each event to the core, and carries out the effects it returns (writes, closes, dials,
probes, compare-and-set removals against the configuration in NATS KV, stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from octosync.chain.config import ChainConfig, Member
from octosync.chain.link import Compute
from octosync.chain.link_frames import AnyFrame, LinkFrame, Refused, StatusRequest
from octosync.chain.membership import (
    Close,
    ConnId,
    Delivery,
    Dial,
    Effect,
    Membership,
    Probe,
    Refresh,
    RemoveMember,
    ReplaceReplica,
    Send,
    Stop,
)
from octosync.errors import OctosyncError
from octosync.links import frames
from octosync.links.config_store import HEARTBEAT_TTL, ConfigStore
from octosync.store.chain import Durability, LinkStore
from octosync.wire import chain_link

log = logging.getLogger("octosync.chain")

POLL = 0.05
"""How often the configuration is re-read (besides on every suspicion)."""
DIAL_ATTEMPTS = 3
PROBE_ATTEMPTS = 2
PROBE_RETRY = 0.02
"""A refused connect is retried once after this: a listening link never stops listening."""
PROBE_TIMEOUT = 1.0
RECOVER_DELAY = 0.02
"""A successor whose socket dropped is probed after this (a restart may be under way)."""
DEVICE_HIGH_WATER = 8 * 1024 * 1024
"""A device whose socket buffer grows past this is dropped; it reconnects and bootstraps."""


@dataclass(eq=False)
class Conn:
    """One TCP connection: bytes only (what it is to the chain, the core knows)."""

    id: ConnId
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    closed: bool = False

    def send(self, frame: LinkFrame) -> None:
        self.send_bytes(chain_link.encode(frame))

    def send_bytes(self, data: bytes) -> None:
        if not self.closed:
            self.writer.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


@dataclass
class NodeOptions:
    chain: str
    node_id: str
    host: str
    port: int
    config_url: str
    app: Compute
    data_dir: Path
    ready: Callable[[int], None] = lambda port: None
    durability: Durability = "full"
    """``full``: every commit is fsynced (survives power loss of this machine); ``normal``:
    WAL without an fsync per commit (survives the process's crash, as JetStream's default
    file store does; the other links hold the rest)."""


Input = Callable[[Membership], list[Effect]]
"""One event for the membership core, with what it arrived with."""


@dataclass(frozen=True, slots=True)
class _Frames:
    """One read's worth of frames from one connection."""

    conn: ConnId
    frames: list[AnyFrame]

    def __call__(self, core: Membership) -> list[Effect]:
        effects: list[Effect] = []
        for frame in self.frames:
            effects.extend(core.receive(self.conn, frame))
        return effects


BATCH_FRAMES = 4096
"""Inputs taken into one batch (one commit), counting each frame of a burst."""


def _weight(item: Input) -> int:
    return len(item.frames) if isinstance(item, _Frames) else 1


@dataclass
class Node:
    options: NodeOptions
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.inbox: asyncio.Queue[Input] = asyncio.Queue()
        self.store = LinkStore(
            self.options.data_dir / f"{self.options.node_id}.sqlite",
            durability=self.options.durability,
        )
        self.configs = ConfigStore(self.options.config_url, self.options.chain)
        self.tasks: set[asyncio.Task[None]] = set()
        self.me = Member(self.options.node_id, self.options.host, self.options.port)
        self.core = Membership(self.me)
        self.conns: dict[ConnId, Conn] = {}
        self._ids = itertools.count(1)

    @property
    def epoch(self) -> int:
        return self.core.epoch

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        server = await asyncio.start_server(self._accept, self.options.host, self.options.port)
        port = server.sockets[0].getsockname()[1]
        self.me = Member(self.options.node_id, self.options.host, port)
        self.core.me = self.me
        await self.configs.open()
        await self.configs.beat(self.me.id)
        self._spawn(self._heartbeat())
        await self._join()
        self._spawn(self._poll_config())
        self._spawn(self._sweep())
        self._spawn(self._process())
        self.options.ready(port)
        # What is alive now (modules, the loaded replica) lives as long as the process; left
        # to the collector, every full collection would scan it (about 20 ms of CPU here),
        # a pause on the path of every event in flight.
        gc.freeze()
        try:
            await self.stopped.wait()
        finally:
            server.close()
            for task in self.tasks:
                task.cancel()
            await self.configs.close()
            self.store.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: task failed", self.me.id, exc_info=task.exception())
            self.stopped.set()

    async def _join(self) -> None:
        """First link: create the chain. Otherwise join at the tail and wait for a copy."""
        me = self.me
        config = await self.configs.change(lambda c: Membership.joining(c, me))
        machine = self.store.load()[0] if config.members == (me,) else None
        self._perform(self.core.join(config, machine))

    async def _heartbeat(self) -> None:
        while True:
            await self.configs.beat(self.me.id)
            await asyncio.sleep(0.4)

    async def _sweep(self) -> None:
        """Heartbeats, for the core to suspect a neighbour that hung with its sockets open."""
        while True:
            await asyncio.sleep(HEARTBEAT_TTL / 2)
            alive = await self.configs.alive()
            self.inbox.put_nowait(partial(Membership.expired, alive=alive))

    async def _poll_config(self) -> None:
        while True:
            config, _ = await self.configs.read()
            if config.epoch > self.core.epoch:
                self._put_config(config)
            await asyncio.sleep(POLL)

    def _put_config(self, config: ChainConfig) -> None:
        self.inbox.put_nowait(partial(Membership.reconfigure, config=config))

    # -- connections -----------------------------------------------------------------------------

    def _open(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Conn:
        conn = Conn(next(self._ids), reader, writer)
        self.conns[conn.id] = conn
        return conn

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self._open(reader, writer)
        self.inbox.put_nowait(partial(Membership.accepted, conn=conn.id))
        await self._read_loop(conn)

    async def _read_loop(self, conn: Conn) -> None:
        incoming = frames.FrameReader(conn.reader)
        try:
            while not conn.closed:
                burst: list[AnyFrame] = []
                try:
                    for payload in await incoming.payloads():
                        burst.append(chain_link.decode(payload))
                finally:  # what decoded before a bad frame is handled, as it arrived
                    if burst:
                        self.inbox.put_nowait(_Frames(conn.id, burst))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except OctosyncError as exc:
            with contextlib.suppress(Exception):
                conn.send(Refused(self.core.epoch, exc.name, str(exc)))
        finally:
            self.inbox.put_nowait(partial(Membership.closed, conn=conn.id))

    async def _dial(self, member: Member, epoch: int) -> None:
        """Connect to our successor; the core introduces us (or drops a stale dial)."""
        for attempt in range(DIAL_ATTEMPTS):
            try:
                reader, writer = await asyncio.open_connection(member.host, member.port)
            except OSError:
                await asyncio.sleep(0.1 * (attempt + 1))
                continue
            conn = self._open(reader, writer)
            dialed = partial(Membership.dialed, conn=conn.id, member=member, epoch=epoch)
            self.inbox.put_nowait(dialed)
            await self._read_loop(conn)
            return
        self.inbox.put_nowait(partial(Membership.unreachable, member=member, epoch=epoch))

    async def _probe(self, member: Member) -> bool:
        """Whether ``member`` is alive. A connect alone proves nothing: a SIGKILLed process's
        listening socket can still accept for an instant after its other sockets closed. So
        the probe asks for the status: an answer means alive, a refused or reset connection
        means dead, and no answer within ``PROBE_TIMEOUT`` (a hung link) is left to its
        heartbeat."""
        for _ in range(PROBE_ATTEMPTS):
            try:
                reader, writer = await asyncio.open_connection(member.host, member.port)
            except OSError:
                await asyncio.sleep(PROBE_RETRY)
                continue
            try:
                writer.write(chain_link.encode(StatusRequest(self.core.epoch)))
                await asyncio.wait_for(frames.read_frame(reader), PROBE_TIMEOUT)
                return True
            except TimeoutError:
                return member.id in await self.configs.alive()
            except (asyncio.IncompleteReadError, OSError, OctosyncError):
                return False
            finally:
                writer.close()
        return False

    async def _run_probe(self, probe: Probe) -> None:
        """A successor that dropped is probed (after ``RECOVER_DELAY``); a suspect neighbour
        counts as alive only if it answers and its heartbeat is live."""
        if probe.recover:
            await asyncio.sleep(RECOVER_DELAY)
            alive = await self._probe(probe.member)
        else:
            alive = (
                await self._probe(probe.member) and probe.member.id in await self.configs.alive()
            )
        self.inbox.put_nowait(partial(Membership.probed, probe=probe, alive=alive))

    async def _remove(self, member: Member) -> None:
        def drop(config: ChainConfig) -> ChainConfig | None:
            return config.without(member.id) if config.member(member.id) == member else None

        config = await self.configs.change(drop)
        log.warning("%s: removed %s (epoch %d)", self.me.id, member.id, config.epoch)
        self._put_config(config)

    async def _refresh(self, refresh: Refresh) -> None:
        config, _ = await self.configs.read()
        self._put_config(config)
        self.inbox.put_nowait(_Frames(refresh.conn, [refresh.frame]))

    # -- the one task that changes the replica ---------------------------------------------------

    async def _process(self) -> None:
        core = self.core
        while True:
            batch = [await self.inbox.get()]
            size = _weight(batch[0])
            while not self.inbox.empty() and size < BATCH_FRAMES:
                batch.append(self.inbox.get_nowait())
                size += _weight(batch[-1])
            for item in batch:
                self._perform(item(core))
            self._send(core.flush_relayed())
            core.compute(self.options.app)
            self.store.commit(core.link, core.epoch)  # on this thread: see the docstring
            self._send(core.flush())
            if core.compute_due:
                self.inbox.put_nowait(Membership.tick)  # another batch computes the rest
            await asyncio.sleep(0)  # let the readers queue the next batch (and heartbeats run)

    def _perform(self, effects: list[Effect]) -> None:
        """Carry out what the membership core decided, in order."""
        for effect in effects:
            match effect:
                case Send(conn=conn_id, frame=frame):
                    conn = self.conns.get(conn_id)
                    if conn is not None:
                        conn.send(frame)
                case Close(conn=conn_id, reason=reason):
                    if reason:
                        log.warning("%s: %s", self.me.id, reason)
                    conn = self.conns.get(conn_id)
                    if conn is not None:
                        conn.close()
                    if conn_id not in self.core.peers:
                        self.conns.pop(conn_id, None)
                case Dial(member=member, epoch=epoch):
                    self._spawn(self._dial(member, epoch))
                case Probe():
                    self._spawn(self._run_probe(effect))
                case RemoveMember(member=member):
                    self._spawn(self._remove(member))
                case Refresh():
                    self._spawn(self._refresh(effect))
                case ReplaceReplica(machine=machine, epoch=epoch):
                    self.store.replace(machine, epoch)
                case Stop(reason=reason):
                    log.warning("%s: %s; stopping", self.me.id, reason)
                    self.stopped.set()

    # -- output ----------------------------------------------------------------------------------

    def _send(self, deliveries: Iterable[Delivery]) -> None:
        """Encode each output once and write each connection's share in one call (one syscall
        per connection per batch, not per frame); a broadcast is one encoding for all devices."""
        pending: dict[ConnId, list[bytes]] = {}
        for delivery in deliveries:
            data = chain_link.encode(delivery.frame)
            for conn_id in delivery.conns:
                pending.setdefault(conn_id, []).append(data)
        devices = set(self.core.devices.values())
        for conn_id, chunks in pending.items():
            conn = self.conns.get(conn_id)
            if conn is None:
                continue
            if conn_id in devices and (
                conn.writer.transport.get_write_buffer_size() > DEVICE_HIGH_WATER
            ):
                conn.close()
                continue
            conn.send_bytes(chunks[0] if len(chunks) == 1 else b"".join(chunks))


def run_node(options: NodeOptions) -> None:
    asyncio.run(Node(options).run())
