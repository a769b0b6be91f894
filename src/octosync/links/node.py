"""One chain link as a process: the ``ChainLink`` core behind TCP, SQLite and NATS.

Everything that changes the replica happens in one task (``_process``), one batch at a time:
take every queued input, feed it to the core, commit what changed to SQLite in one
transaction (group commit), and only then write the outputs to sockets, one write per
connection per batch. So nothing is forwarded or acknowledged that a crash could take back.
The commit runs on the loop's own thread: it is one fsync (about 2 ms here), and handing it
to a worker thread cost more (two thread switches per batch on a busy 2-core machine) than
the reading it let overlap; the kernel buffers what arrives meanwhile.

Membership: the configuration (NATS KV) names the order. The upstream link dials its
downstream (``PeerHello`` with its epoch); the downstream answers with its log end
(``PeerWelcome``) or asks for a copy when it is joining. A link whose neighbour's socket drops
probes the neighbour with a status request; if nothing answers (or its heartbeat expired) it
removes the neighbour by compare-and-set. A link that finds itself out of the configuration
stops: it was fenced, and frames it sends carry an epoch its old neighbours refuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octosync.chain.link import (
    ChainLink,
    Compute,
    Output,
    ToDevice,
    ToDevices,
    ToDownstream,
    ToUpstream,
)
from octosync.chain.records import BootstrapChainRequest, ChainStateMachine
from octosync.errors import NotBootstrapped, OctosyncError, StaleEpoch
from octosync.links import frames
from octosync.links.config import ChainConfig, Member
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
DEVICE_HIGH_WATER = 8 * 1024 * 1024
"""A device whose socket buffer grows past this is dropped; it reconnects and bootstraps."""


@dataclass(eq=False)
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    kind: str = "?"
    peer: str = ""
    since_epoch: int = 0
    bootstrapped: bool = False
    live_from: int = 0
    """Index, in the batch's outputs, of this device's BootstrapComplete (of a downstream's
    resend on its welcome): earlier outputs of the batch must not reach it."""
    closed: bool = False
    attached: bool = False
    """A downstream connection whose ``PeerWelcome`` was handled: events may flow on it."""

    def send(self, frame: chain_link.LinkFrame) -> None:
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


@dataclass
class _Input:
    kind: str
    conn: Conn | None = None
    frame: Any = None
    extra: Any = None


BATCH_FRAMES = 4096
"""Inputs taken into one batch (one commit), counting each frame of a burst."""


def _weight(item: _Input) -> int:
    return len(item.frame) if item.kind == "frames" else 1


@dataclass
class Node:
    options: NodeOptions
    link: ChainLink = field(default_factory=ChainLink)
    epoch: int = 0
    config: ChainConfig = field(default_factory=ChainConfig)
    up: Conn | None = None
    down: Conn | None = None
    devices: dict[str, Conn] = field(default_factory=dict)
    waiting_copy: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.inbox: asyncio.Queue[_Input] = asyncio.Queue()
        self.store = LinkStore(
            self.options.data_dir / f"{self.options.node_id}.sqlite",
            durability=self.options.durability,
        )
        self.configs = ConfigStore(self.options.config_url, self.options.chain)
        self.tasks: set[asyncio.Task[None]] = set()
        self.me = Member(self.options.node_id, self.options.host, self.options.port)

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        server = await asyncio.start_server(self._accept, self.options.host, self.options.port)
        port = server.sockets[0].getsockname()[1]
        self.me = Member(self.options.node_id, self.options.host, port)
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

    def _spawn(self, coro: Any) -> None:
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

        def first_or_append(config: ChainConfig) -> ChainConfig | None:
            if not config.members:
                return ChainConfig((self.me,), config.epoch + 1)
            return config.with_tail(self.me)

        config = await self.configs.change(first_or_append)
        if config.members == (self.me,):
            machine, _ = self.store.load()
            self.link = ChainLink(machine)
        else:
            self.link = ChainLink(ChainStateMachine(), has_upstream=True)
            self.waiting_copy = True
        self._reconfigure(config)

    async def _heartbeat(self) -> None:
        while True:
            await self.configs.beat(self.me.id)
            await asyncio.sleep(0.4)

    async def _sweep(self) -> None:
        """A neighbour whose heartbeat expired is removed even if its sockets stay open (hung)."""
        while True:
            await asyncio.sleep(HEARTBEAT_TTL / 2)
            alive = await self.configs.alive()
            for after in (False, True):
                member = self._neighbour(after=after)
                if member is not None and member.id not in alive:
                    await self._remove_if_dead(member)

    async def _poll_config(self) -> None:
        while True:
            config, _ = await self.configs.read()
            if config.epoch > self.epoch:
                self.inbox.put_nowait(_Input("config", extra=config))
            await asyncio.sleep(POLL)

    # -- connections -----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(reader, writer)
        await self._read_loop(conn)

    async def _read_loop(self, conn: Conn) -> None:
        incoming = frames.FrameReader(conn.reader)
        try:
            while not conn.closed:
                burst: list[chain_link.AnyFrame] = []
                try:
                    for payload in await incoming.payloads():
                        burst.append(chain_link.decode(payload))
                finally:  # what decoded before a bad frame is handled, as it arrived
                    if burst:
                        self.inbox.put_nowait(_Input("frames", conn, burst))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except OctosyncError as exc:
            with contextlib.suppress(Exception):
                conn.send(chain_link.Refused(self.epoch, exc.name, str(exc)))
        finally:
            self.inbox.put_nowait(_Input("closed", conn))

    async def _dial(self, member: Member, epoch: int) -> None:
        """Connect to our successor and introduce ourselves; retried while it is our successor."""
        for attempt in range(DIAL_ATTEMPTS):
            try:
                reader, writer = await asyncio.open_connection(member.host, member.port)
            except OSError:
                await asyncio.sleep(0.1 * (attempt + 1))
                continue
            conn = Conn(reader, writer, "down", member.id, epoch)
            conn.send(chain_link.PeerHello(epoch, self.me.id))
            self.inbox.put_nowait(_Input("dialed", conn))
            await self._read_loop(conn)
            return
        self.inbox.put_nowait(_Input("unreachable", extra=(member, epoch)))

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
                writer.write(chain_link.encode(chain_link.StatusRequest(self.epoch)))
                await asyncio.wait_for(frames.read_frame(reader), PROBE_TIMEOUT)
                return True
            except TimeoutError:
                return member.id in await self.configs.alive()
            except (asyncio.IncompleteReadError, OSError, OctosyncError):
                return False
            finally:
                writer.close()
        return False

    async def _remove_if_dead(self, member: Member) -> None:
        if await self._probe(member) and member.id in await self.configs.alive():
            return
        await self._remove(member)

    async def _remove(self, member: Member) -> None:
        def drop(config: ChainConfig) -> ChainConfig | None:
            return config.without(member.id) if config.member(member.id) == member else None

        config = await self.configs.change(drop)
        log.warning("%s: removed %s (epoch %d)", self.me.id, member.id, config.epoch)
        self.inbox.put_nowait(_Input("config", extra=config))

    # -- the one task that changes the replica ---------------------------------------------------

    async def _process(self) -> None:
        while True:
            batch = [await self.inbox.get()]
            size = _weight(batch[0])
            while not self.inbox.empty() and size < BATCH_FRAMES:
                batch.append(self.inbox.get_nowait())
                size += _weight(batch[-1])
            outputs: list[tuple[Output, int]] = []
            for item in batch:
                self._handle(item, outputs)
            if not self.waiting_copy:
                for out in self.link.compute(self.options.app):
                    outputs.append((out, self.epoch))
            self.store.commit(self.link, self.epoch)  # on this thread: see the docstring
            self._send(outputs)
            if not self.waiting_copy and self.link.compute_due:
                self.inbox.put_nowait(_Input("tick"))
            await asyncio.sleep(0)  # let the readers queue the next batch (and heartbeats run)

    def _handle(self, item: _Input, outputs: list[tuple[Output, int]]) -> None:
        if item.kind == "config":
            self._reconfigure(item.extra, outputs)
        elif item.kind == "frames":  # one read's worth, from one connection
            assert item.conn is not None
            for frame in item.frame:
                self._handle_frame(item.conn, frame, outputs)
        elif item.kind == "frame":
            assert item.conn is not None
            self._handle_frame(item.conn, item.frame, outputs)
        elif item.kind == "dialed":
            assert item.conn is not None
            if self.down is None and item.conn.since_epoch == self.epoch:
                self.down = item.conn
            else:
                item.conn.close()
        elif item.kind == "closed":
            self._closed(item.conn)
        elif item.kind == "unreachable":
            member, epoch = item.extra
            if epoch == self.epoch:
                self._spawn(self._remove_if_dead(member))

    def _handle_frame(
        self, conn: Conn, frame: chain_link.AnyFrame, outputs: list[tuple[Output, int]]
    ) -> None:
        try:
            self._frame(conn, frame, outputs)
        except OctosyncError as exc:
            log.warning("%s: %s from %s: %s", self.me.id, exc.name, conn.kind, exc)
            conn.send(chain_link.Refused(self.epoch, exc.name, str(exc)))
            conn.close()

    def _frame(
        self, conn: Conn, frame: chain_link.AnyFrame, outputs: list[tuple[Output, int]]
    ) -> None:
        if isinstance(frame, chain_link.Forward):
            if conn is not self.up and conn is not self.down:
                raise StaleEpoch(f"a link frame from {conn.peer or 'a stranger'}, not a neighbour")
            if frame.epoch < conn.since_epoch:
                raise StaleEpoch(f"frame of epoch {frame.epoch} on a link of {conn.since_epoch}")
            for out in self.link.receive(frame.message):
                outputs.append((out, self.epoch))
        elif isinstance(frame, chain_link.FromDevice):
            if conn.kind != "device" or self.devices.get(conn.peer) is not conn:
                raise StaleEpoch("device frame on a connection that is not a head's device")
            if isinstance(frame.message, BootstrapChainRequest):
                conn.bootstrapped = True
                conn.live_from = len(outputs)
                produced = self.link.bootstrap(conn.peer, frame.message)
            elif not conn.bootstrapped:
                raise NotBootstrapped("DeviceEvent before BootstrapChainRequest")
            else:
                produced = self.link.receive_device_event(conn.peer, frame.message)
            outputs.extend((out, self.epoch) for out in produced)
        elif isinstance(frame, chain_link.PeerHello):
            self._peer_hello(conn, frame, outputs)
        elif isinstance(frame, chain_link.PeerWelcome):
            self._peer_welcome(conn, frame, outputs)
        elif isinstance(frame, chain_link.Copy):
            self._copy(conn, frame, outputs)
        elif isinstance(frame, chain_link.DeviceHello):
            if self.link.has_upstream or self.waiting_copy:
                conn.send(
                    chain_link.Refused(self.epoch, "NotHead", f"{self.me.id} is not the head")
                )
                conn.close()
                return
            previous = self.devices.get(frame.device)
            if previous is not None:
                previous.close()
            conn.kind, conn.peer = "device", frame.device
            self.devices[frame.device] = conn
        elif isinstance(frame, chain_link.StatusRequest):
            conn.send(self._status())
        elif isinstance(frame, chain_link.Refused):
            log.warning("%s: refused by %s: %s %s", self.me.id, conn.peer, frame.code, frame.reason)
            conn.close()

    def _peer_hello(
        self, conn: Conn, hello: chain_link.PeerHello, outputs: list[tuple[Output, int]]
    ) -> None:
        if hello.epoch > self.epoch:
            self._spawn(self._refresh(then=_Input("frame", conn, hello)))
            return
        predecessor = self._neighbour(after=False)
        if predecessor is None or predecessor.id != hello.sender:
            raise StaleEpoch(
                f"{hello.sender} (epoch {hello.epoch}) is not the predecessor in epoch {self.epoch}"
            )
        if self.up is not None and self.up is not conn:
            self.up.close()
        conn.kind, conn.peer, conn.since_epoch = "up", hello.sender, hello.epoch
        self.up = conn
        conn.send(chain_link.PeerWelcome(self.epoch, self.link.next_chain, self.waiting_copy))
        if not self.waiting_copy:
            outputs.extend((out, self.epoch) for out in self.link.attach_upstream())

    def _peer_welcome(
        self, conn: Conn, welcome: chain_link.PeerWelcome, outputs: list[tuple[Output, int]]
    ) -> None:
        if conn is not self.down or self.waiting_copy:
            conn.close()  # not ours, or we have nothing to give yet: the dial is retried
            return
        if welcome.need_copy:
            conn.send(chain_link.Copy(self.epoch, self.link.machine()))
            next_chain = self.link.next_chain
        else:
            next_chain = welcome.next_chain_sequencer
        conn.attached = True
        conn.live_from = len(outputs)  # earlier events of this batch are in the resend below
        outputs.extend((out, self.epoch) for out in self.link.attach_downstream(next_chain))

    def _copy(self, conn: Conn, copy: chain_link.Copy, outputs: list[tuple[Output, int]]) -> None:
        if conn is not self.up or not self.waiting_copy:
            raise StaleEpoch("a replica copy from a link that is not our predecessor")
        self.store.replace(copy.machine, self.epoch)
        self.link = ChainLink(copy.machine, has_upstream=True, has_downstream=True)
        self.waiting_copy = False
        self._apply_roles(outputs)
        outputs.extend((out, self.epoch) for out in self.link.attach_upstream())

    async def _refresh(self, then: _Input) -> None:
        config, _ = await self.configs.read()
        self.inbox.put_nowait(_Input("config", extra=config))
        self.inbox.put_nowait(then)

    def _closed(self, conn: Conn | None) -> None:
        if conn is None:
            return
        conn.close()
        if conn is self.down:
            self.down = None
            successor = self._neighbour(after=True)
            if successor is not None:
                self._spawn(self._recover_down(successor, self.epoch))
        elif conn is self.up:
            self.up = None
            predecessor = self._neighbour(after=False)
            if predecessor is not None:
                self._spawn(self._remove_if_dead(predecessor))
        elif conn.kind == "device" and self.devices.get(conn.peer) is conn:
            del self.devices[conn.peer]

    async def _recover_down(self, member: Member, epoch: int) -> None:
        await asyncio.sleep(0.02)
        if await self._probe(member):
            if epoch == self.epoch and self.down is None:
                await self._dial(member, epoch)
            return
        await self._remove(member)  # probed dead just now: no second probe

    def _neighbour(self, *, after: bool) -> Member | None:
        if self.config.member(self.me.id) is None:
            return None
        if after:
            return self.config.successor(self.me.id)
        return self.config.predecessor(self.me.id)

    # -- configuration ---------------------------------------------------------------------------

    def _reconfigure(
        self, config: ChainConfig, outputs: list[tuple[Output, int]] | None = None
    ) -> None:
        if config.epoch <= self.epoch:
            return
        if config.member(self.me.id) != self.me:
            log.warning("%s: not in configuration %d; stopping", self.me.id, config.epoch)
            self.stopped.set()
            return
        old = self.config
        self.config, self.epoch = config, config.epoch
        old_pred = old.predecessor(self.me.id) if old.member(self.me.id) else None
        old_succ = old.successor(self.me.id) if old.member(self.me.id) else None
        pred = config.predecessor(self.me.id)
        succ = config.successor(self.me.id)
        if pred != old_pred:
            if self.up is not None:
                self.up.close()
                self.up = None
            if pred is not None and not self.link.has_upstream:
                self.link.has_upstream = True
                for conn in self.devices.values():
                    conn.close()
                self.devices.clear()
        if succ != old_succ or (succ is not None and self.down is None):
            if self.down is not None:
                self.down.close()
                self.down = None
            if succ is not None:
                self.link.has_downstream = True  # stop computing at once; attach on welcome
                self._spawn(self._dial(succ, self.epoch))
        if not self.waiting_copy:
            self._apply_roles(outputs if outputs is not None else [])

    def _apply_roles(self, outputs: list[tuple[Output, int]]) -> None:
        if self.config.predecessor(self.me.id) is None and self.link.has_upstream:
            self.link.detach_upstream()
        if self.config.successor(self.me.id) is None and self.link.has_downstream:
            outputs.extend((out, self.epoch) for out in self.link.detach_downstream())

    # -- output ----------------------------------------------------------------------------------

    def _send(self, outputs: list[tuple[Output, int]]) -> None:
        """Encode each output once and write each connection's share in one call (one syscall
        per connection per batch, not per frame); a broadcast is one encoding for all devices."""
        pending: dict[Conn, list[bytes]] = {}
        down = self.down if self.down is not None and self.down.attached else None
        for i, (out, epoch) in enumerate(outputs):
            if isinstance(out, ToDownstream):
                # Before the welcome, attach_downstream resends from where the downstream ends.
                if down is not None and down.live_from <= i:
                    pending.setdefault(down, []).append(
                        chain_link.encode(chain_link.Forward(epoch, out.message))
                    )
            elif isinstance(out, ToUpstream):
                if self.up is not None:
                    pending.setdefault(self.up, []).append(
                        chain_link.encode(chain_link.Forward(epoch, out.message))
                    )
            elif isinstance(out, ToDevice):
                conn = self.devices.get(out.device)
                if conn is not None and conn.bootstrapped and conn.live_from <= i:
                    pending.setdefault(conn, []).append(
                        chain_link.encode(chain_link.ForDevice(epoch, out.message))
                    )
            elif isinstance(out, ToDevices):
                broadcast = chain_link.encode(chain_link.ForDevice(epoch, out.message))
                for conn in self.devices.values():
                    if conn.bootstrapped and conn.live_from <= i:
                        pending.setdefault(conn, []).append(broadcast)
        for conn, chunks in pending.items():
            if conn.kind == "device" and (
                conn.writer.transport.get_write_buffer_size() > DEVICE_HIGH_WATER
            ):
                conn.close()
                continue
            conn.send_bytes(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        for conn in self.devices.values():
            conn.live_from = 0
        if self.down is not None:
            self.down.live_from = 0

    def _status(self) -> chain_link.Status:
        role = "head" if self.link.is_head else "tail" if self.link.is_tail else "middle"
        if self.link.is_head and self.link.is_tail:
            role = "head+tail"
        if self.waiting_copy:
            role = "joining"
        return chain_link.Status(
            self.epoch,
            self.me.id,
            role,
            self.link.next_chain,
            self.link.trim,
            self.link.next_state,
            self.link.acked_through,
            len(self.link.live_events()),
            len(self.devices),
            self.link.state,
        )


def run_node(options: NodeOptions) -> None:
    asyncio.run(Node(options).run())
