"""The TopGun face's ways out: when fan-outs are flushed, and how one message reaches many.

TopGun fan-outs go out at most once per ``FLUSH_GAP``: an idle server sends an event at once,
a busy one puts the events of many client batches into one message per subscriber. A large
message shared by several connections that negotiated permessage-deflate is compressed once
for all of them (``server_no_context_takeover``: each compressed message stands alone). The
face implements ``server.ports.TopGunPort`` for its sessions and ``links.cluster_maps.MapsHost``
for the cluster's maps link; it writes through the runtime's ``deliver`` and journals through
the one commit path (``server.topgun_effects.carry_out``, ``store.commit_path``).

Search indexing runs on the face's indexer thread: written keys wait in the core's index feed
(coalesced per key), and one batch at a time, at most once per commit gap, goes to
``TopGunCore.indexer`` on that thread; its answer comes back to the loop, which publishes the
commit (searches read it from then on), moves the index watermark and sends the live
searches' updates. The loop never waits for tokenizing, embedding or a commit.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from octosync.errors import OctosyncError
from octosync.hub import Hub
from octosync.hub.model import lazily_frame
from octosync.hub.streams import map_name_of, map_stream_id
from octosync.ipc.messages import Delta, Snapshot
from octosync.refresh.device_tokens import SECRET_BYTES, Binding, Minted, mint
from octosync.server.auth import AuthConfig, ClaimGrants, authenticate
from octosync.server.gap_flush import GapFlush
from octosync.server.ports import LiveConnection, MapHolder, Replicator
from octosync.server.topgun_effects import carry_out
from octosync.server.topgun_wire import Encoder
from octosync.store.commit_path import CommitPath
from octosync.store.device_credentials import DeviceCredentials
from octosync.topgun import Effects, Outbound, TopGunCore
from octosync.topgun.index_feed import IndexBatch
from octosync.topgun.indexer import Indexed
from octosync.topgun.offload import MAX_RUNNING as MAX_OFFLOADED
from octosync.topgun.offload import OffLoop
from octosync.wire import topgun as tg
from octosync.wire.websocket import DEFLATE_MIN_BYTES, FrameDeflater, ws_frame, ws_frame_header

log = logging.getLogger(__name__)

FLUSH_GAP = 0.005
"""Seconds between two TopGun fan-outs at most once per this gap: under load the events of
many client batches share one message per subscriber; an idle server is not delayed."""
DEFLATE_SHARED = 2
"""A message is compressed when at least this many of its targets negotiated deflate."""
SPLIT_WRITE_BYTES = 64 * 1024
SPLIT_WRITE_TARGETS = 2
"""A plain message this large for this few targets is written as header then payload: two
writes are cheaper than copying the payload behind its header (a writer's events, which
leave out its own, go to it alone)."""

Deliver = Callable[..., None]


class TopGunFace:
    """The TopGun core with its flush timing, its shared deflate and its ways out."""

    def __init__(
        self,
        core: TopGunCore,
        hub: Hub,
        links: Mapping[int, LiveConnection],
        *,
        deliver: Deliver,
        commits: CommitPath,
        auth: AuthConfig,
        insecure_dev: bool,
        max_frame: int,
        data_dir: Path,
    ) -> None:
        self.topgun = core
        self._hub = hub
        self.links = links
        self._deliver = deliver
        self.commits = commits
        """The one commit path (the storage rules, the journal, after-commit effects)."""
        self._auth = auth
        self.insecure_dev = insecure_dev
        self.max_frame = max_frame
        self.replicator: Replicator | None = None
        """Where TopGun op records go to be stored by the cluster (``--cluster``)."""
        self.map_holder: MapHolder | None = None
        """Maps held by interest (``[cluster] map_hold = "interest"``)."""
        self._flusher = GapFlush(self._flush, FLUSH_GAP)
        self._offloaded = 0
        """Off-loop TopGun requests (SQL, journal reads) running now."""
        self._deflater = FrameDeflater()
        self._index_pool: ThreadPoolExecutor | None = None
        """The indexer thread (started with the first batch)."""
        self._indexing = False
        self._index_timer: asyncio.TimerHandle | None = None
        self._data_dir = data_dir
        self._devices: DeviceCredentials | None = None
        """Device credentials (opened on the device thread by the first binding)."""
        self._device_pool = ThreadPoolExecutor(1, thread_name_prefix="octosync-devices")
        self._devices_closed = False

    def authenticate(self, token: str | None) -> ClaimGrants:
        return authenticate(token, self._auth)

    def deliver(self, conn: int, *data: bytes) -> None:
        self._deliver(conn, *data)

    def deliver_all(self, out: Sequence[Outbound]) -> None:
        """TopGun messages for other connections: framed once and written to each target. A
        large message shared by several targets that negotiated deflate is compressed once
        for them (``DEFLATE_SHARED``); one for a single connection goes plain (compressing
        it would cost the loop as much as the write it saves)."""
        links = self.links
        encode = Encoder()
        for ob in out:
            targets = ob.targets
            body = encode(ob.message)
            if len(targets) >= DEFLATE_SHARED and len(body) >= DEFLATE_MIN_BYTES:
                packed = [t for t in targets if (link := links.get(t)) is not None and link.deflate]
                if len(packed) >= DEFLATE_SHARED:
                    frame = self._deflater.frame(body)
                    for target in packed:
                        self._deliver(target, frame)
                    if len(packed) == len(targets):
                        continue
                    took = set(packed)
                    targets = tuple(t for t in targets if t not in took)
            if len(body) >= SPLIT_WRITE_BYTES and len(targets) <= SPLIT_WRITE_TARGETS:
                parts = (ws_frame_header(len(body), text=False), body)
                for target in targets:
                    self._deliver(target, *parts)
                continue
            data = ws_frame(body, text=False)
            for target in targets:
                self._deliver(target, data)

    def follow_map(self, stream: str) -> None:
        """A lazily client asked for ``map:<name>``: the server starts producing it (once; with
        maps held by interest, once the map is loaded here)."""
        name = map_name_of(stream)
        if name is None:
            return
        holder = self.map_holder
        if holder is not None and not holder.follow(name, lambda: self._start_map(stream, name)):
            return

        self._start_map(stream, name)

    def _start_map(self, stream: str, name: str) -> None:
        snapshot = self.topgun.follow_map(name)
        if snapshot is not None:
            self._hub.publish_from_server(stream, lazily_frame(snapshot))

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None:
        """The ``map:`` streams' frames the TopGun core made, into the hub."""
        for name, msg in frames:
            self._hub.publish_from_server(map_stream_id(name), lazily_frame(msg))

    def flush_soon(self) -> None:
        """Send the TopGun events applied so far, all at once: at the end of this event-loop
        turn, or, when the last fan-out went out less than ``FLUSH_GAP`` ago, once that
        gap has passed. An idle server sends an event at once; a busy one sends fewer, larger
        messages (each fan-out costs a write per subscriber, whatever it carries)."""
        self.index_soon()
        if self.topgun.has_pending_events():
            self._flusher.soon()

    def index_soon(self) -> None:
        """Hand the next batch of written keys to the indexer thread: now when it is due, else
        once the commit gap has passed (one batch at a time)."""
        if self._indexing:
            return
        core = self.topgun
        wait = core.index_due_in()
        if wait is None:
            return
        loop = asyncio.get_running_loop()
        if wait > 0:
            if self._index_timer is None:
                self._index_timer = loop.call_later(wait / 1000, self._index_due)
            return
        batch = core.take_index_batch()
        if batch is None:
            return
        if self._index_pool is None:
            self._index_pool = ThreadPoolExecutor(1, thread_name_prefix="octosync-indexer")
        self._indexing = True
        done = self._index_pool.submit(core.indexer.run, batch, True)
        done.add_done_callback(lambda fut: loop.call_soon_threadsafe(self._indexed, batch, fut))

    def _index_due(self) -> None:
        self._index_timer = None
        self.index_soon()

    def _indexed(self, batch: IndexBatch, done: Future[Indexed]) -> None:
        """The indexer thread's step is over (on the loop)."""
        self._indexing = False
        try:
            result = done.result()
        except Exception:
            log.exception("indexing TopGun writes failed; their keys are indexed again")
            self.topgun.index_failed(batch)
        else:
            self.apply(self.topgun.indexed(result))
        self.index_soon()

    def bind_device(
        self, subject: str | None, presented: str | None, then: Callable[[Binding | None], None]
    ) -> None:
        """Present-or-mint on the device thread (a commit per binding, never on the loop);
        a store that fails leaves the connection without a device id, as TopGun's does."""
        loop = asyncio.get_running_loop()
        try:
            done = self._device_pool.submit(self._bind, subject, presented)
        except RuntimeError:  # the server is closing: no binding, the ack still goes out
            then(None)
            return

        def bound(fut: Future[Binding]) -> None:
            try:
                binding: Binding | None = fut.result()
            except Exception:
                log.exception("binding a TopGun device failed; the connection has no device id")
                binding = None
            then(binding)

        done.add_done_callback(lambda fut: loop.call_soon_threadsafe(bound, fut))

    def _bind(self, subject: str | None, presented: str | None) -> Binding:
        if self._devices is None:
            self._devices = DeviceCredentials(self._data_dir)
        return self._devices.present_or_mint(subject, presented, _fresh_device)

    def _close_devices(self) -> None:
        if self._devices is not None:
            self._devices.close()
            self._devices = None

    def close(self) -> None:
        """Stop the indexer and device threads (after the batch it may be indexing)."""
        if not self._devices_closed:
            self._devices_closed = True
            self._device_pool.submit(self._close_devices)
            self._device_pool.shutdown(wait=True)  # bindings asked for still commit
        if self._index_timer is not None:
            self._index_timer.cancel()
            self._index_timer = None
        if self._index_pool is not None:
            self._index_pool.shutdown(wait=True, cancel_futures=True)
            self._index_pool = None

    def _flush(self) -> None:
        self.apply(self.topgun.flush())
        self.flush_soon()  # live queries or vectors left to update: another turn, later

    def offload(self, job: OffLoop) -> None:
        """Run ``job`` on a worker thread, encode what it returns there, and send it to its
        connection (at most ``offload.MAX_RUNNING`` at once; beyond that the job's own
        "busy" answer goes now). A job with ``seconds`` is interrupted that long after its
        worker starts it, and every ``INTERRUPT_AGAIN`` seconds after until it returns."""
        if self._offloaded >= MAX_OFFLOADED:
            self._answer(job, [tg.encode(m) for m in job.busy()])
            return
        self._offloaded += 1
        loop = asyncio.get_running_loop()
        bound = _Bound(loop, job)

        def work() -> list[bytes]:
            bound.started()
            return [tg.encode(m) for m in job.run()]

        done = loop.run_in_executor(None, work)

        def answer(result: asyncio.Future[list[bytes]]) -> None:
            self._offloaded -= 1
            bound.over()
            try:
                messages = result.result()
            except Exception:
                log.exception("an off-loop TopGun request failed")
                messages = []
            self._answer(job, messages)

        done.add_done_callback(answer)

    def _answer(self, job: OffLoop, messages: list[bytes]) -> None:
        if messages:
            self._deliver(job.conn, *(ws_frame(m, text=False) for m in messages))
        if job.after is not None:
            job.after()

    def apply(self, fx: Effects) -> None:
        """TopGun effects that no session sends (lock expiry, a disconnect, the GC): ``out``
        now, ``durable`` once ``records`` are committed."""
        try:
            carry_out(self, 0, fx, None)
        except OctosyncError as err:  # the writer is full: these grants time out client-side
            log.warning("TopGun effects not journaled, not sent: %s", err)


def _fresh_device() -> Minted:
    return mint(uuid.uuid4(), secrets.token_bytes(SECRET_BYTES))


INTERRUPT_AGAIN = 0.25
"""Seconds between interrupts of an off-loop job past its time, until it returns."""


class _Bound:
    """An off-loop job's time bound, kept by the loop: the timer starts when the worker
    starts the job (from the worker's thread, through the loop) and ends when it returns."""

    def __init__(self, loop: asyncio.AbstractEventLoop, job: OffLoop) -> None:
        self.loop = loop
        self.job = job
        self.handle: asyncio.TimerHandle | None = None
        self.done = False

    def started(self) -> None:
        """On the worker thread, as it starts the job."""
        if self.job.seconds is not None and self.job.interrupt is not None:
            self.loop.call_soon_threadsafe(self._arm, self.job.seconds)

    def _arm(self, seconds: float) -> None:
        if not self.done:
            self.handle = self.loop.call_later(seconds, self._fire)

    def _fire(self) -> None:
        if self.done or self.job.interrupt is None:
            return
        self.job.interrupt()
        self._arm(INTERRUPT_AGAIN)

    def over(self) -> None:
        self.done = True
        if self.handle is not None:
            self.handle.cancel()
