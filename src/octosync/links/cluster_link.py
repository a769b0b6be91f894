"""A server's link to the cluster over NATS: another transport into the same hub.

It only moves bytes and performs what ``cluster.core.ClusterCore`` decides: it publishes the
frames the core forwards, feeds frames, heartbeats and ownership entries from NATS into the
core, performs compare-and-sets in JetStream KV, answers snapshot requests from the hub's own
mirror, and applies remote frames through one hub connection per remote owner (so the hub's
authority and fan-out stay the only ones).

WVP streams (``warp:<id>``) cross the same way under the same core, keyed by their hub name:
their frames carry canonical CBOR (``wire.cluster.wvp_frame_of``), a snapshot is the owner's
hub replay (its last snapshot and the diffs since), and the connection standing for a remote
owner is of the WVP face (``REMOTE_WVP_VIEW``), since the hub lets only that face produce them.

Subjects (``PREFIX`` = ``octosync.<cluster>``): ``PREFIX.f.<stream>`` stream frames,
``PREFIX.hb`` heartbeats, ``PREFIX.snap.<node>`` snapshot requests to a node; the KV bucket
``octosync_<cluster>_owners`` holds one entry per stream. Stream names are written in subjects
and keys as unpadded base64url.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

import nats
from msgspec.structs import replace
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from octosync.cluster.core import (
    Apply,
    Claim,
    ClusterCore,
    ClusterTiming,
    DropRemote,
    Effect,
    Forward,
    Hold,
    Kick,
    PublishHeld,
    PublishSnapshot,
    Release,
    RequestSnapshot,
)
from octosync.cluster.writer_aliases import WriterAliases
from octosync.errors import ConfigError, ForbiddenPublish, OctosyncError
from octosync.hub import AllowAll, DiffFrame, Hub, OutFrame, SnapshotFrame, ViewKey, lazily_frame
from octosync.hub.model import Body, Frame
from octosync.hub.streams import stream_face
from octosync.hub.types import ConnId, StreamId
from octosync.ipc.messages import Delta, RemoteOp, RemoteOpResult, Snapshot
from octosync.links import nats_server
from octosync.wire import cluster as wire
from octosync.wire import wvp
from octosync.wire.cluster import (
    ClusterFrame,
    Heartbeat,
    NoSnapshot,
    SnapshotRequest,
    StreamLoad,
    WvpFrame,
)

log = logging.getLogger("octosync.cluster")

DEFAULT_CLUSTER = "octosync"
NODE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REMOTE_ENCODER = "lazily-cluster"
REMOTE_VIEW = ViewKey("lazily", REMOTE_ENCODER)
"""The view of the hub connections that stand for remote owners and writers: what the hub
queues for them (a subscriber's write to a remote owner) is the body in ``wire.msgpack``."""
REMOTE_WVP_ENCODER = "wvp-cluster"
REMOTE_WVP_VIEW = ViewKey("wvp", REMOTE_WVP_ENCODER)
"""The view of the connections that stand for remote owners of WVP streams: the hub lets only
the WVP face produce them, and WVP routes nothing to a producer but resync requests, which
this view encodes as WVP packets for the owner's node (``Resync``), where its producer
answers with a snapshot that crosses back like any frame."""
CARRIED = (Snapshot, Delta, wvp.WarpSnapshot, wvp.WarpDiff)
"""The frame bodies that cross nodes: lazily messages and WVP stream frames."""
REQUEST_TIMEOUT = 1.0


def check_node_id(node: str) -> str:
    if not NODE_ID.match(node):
        raise ConfigError(
            f"--node-id {node!r}: use 1 to 64 letters, digits, '-' or '_'", path="node_id"
        )
    return node


def token(stream: str) -> str:
    """A stream name as one subject token and KV key (unpadded base64url, never empty)."""
    return "s" + base64.urlsafe_b64encode(stream.encode()).decode().rstrip("=")


def stream_of(tok: str) -> str:
    raw = tok[1:]
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


MAX_LISTED = 200
"""Documents a heartbeat names at most (it counts them all)."""


class Subjects:
    def __init__(self, cluster: str) -> None:
        self.prefix = f"octosync.{cluster}"
        self.heartbeat = f"{self.prefix}.hb"
        self.bucket = f"octosync_{cluster}_owners"
        self.snapshots_bucket = f"octosync_{cluster}_snapshots"

    def frame(self, stream: str) -> str:
        return f"{self.prefix}.f.{token(stream)}"

    def snapshots(self, node: str) -> str:
        return f"{self.prefix}.snap.{node}"

    def writes(self, node: str) -> str:
        return f"{self.prefix}.w.{node}"


async def connect(url: str, *, timeout: float = 5.0, name: str | None = None) -> NatsClient:
    """The cluster's NATS client (``nats_server.connect``: bounded, then reconnecting);
    ``name``: how NATS's monitoring (``/connz``) names the connection."""
    return await nats_server.connect(
        url, timeout=timeout, no_echo=True, pending_size=64 * 1024 * 1024, name=name
    )


async def owners_bucket(nc: NatsClient, subjects: Subjects, name: str | None = None) -> KeyValue:
    """The ownership bucket (or the bucket ``name``), created on first use."""
    js = nc.jetstream()
    try:
        return await js.key_value(name or subjects.bucket)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=name or subjects.bucket, history=1)


class Faultable(Protocol):
    """A served connection, as far as the cluster resets it (``server.connection``)."""

    def fault(self, err: OctosyncError) -> None: ...


class ClusterHost(Protocol):
    """What the cluster link uses of the server it joins (``server.runtime.Runtime``): the hub,
    its live connections (to reset one) and fresh connection ids for the stand-ins."""

    @property
    def hub(self) -> Hub: ...

    @property
    def links(self) -> Mapping[int, Faultable]: ...

    def new_conn_id(self) -> int: ...


class ClusterLink:
    """Joins one server's runtime to the cluster at ``url`` as node ``node``."""

    def __init__(
        self,
        runtime: ClusterHost,
        url: str,
        node: str,
        *,
        cluster: str = DEFAULT_CLUSTER,
        timing: ClusterTiming | None = None,
    ) -> None:
        self.rt = runtime
        self.url = url
        self.node = check_node_id(node)
        self.subjects = Subjects(cluster)
        self.core = ClusterCore(node, time.monotonic, timing)
        self.public_url = ""
        """This node's lazily URL, for ``cluster status`` (set once the port is bound)."""
        self.topgun_url = ""
        """This node's TopGun URL, for the partition map (set once the port is bound)."""
        self.documents: Callable[[], list[str]] | None = None
        """The shared documents this node holds (held by interest), for its heartbeats."""
        self.maps: Callable[[], list[str]] | None = None
        """The TopGun maps this node holds (held by interest), for its heartbeats."""
        self._topgun_urls: dict[str, str] = {}
        """Each other node's TopGun URL, as its last heartbeat said."""
        self._nc: NatsClient | None = None
        self._kv: KeyValue | None = None
        self._kept: KeyValue | None = None
        self._remote: dict[str, ConnId] = {}
        self._held: dict[str, list[Snapshot | Delta | WvpFrame]] = {}
        self._writer: ConnId | None = None
        self._stopping = False
        runtime.hub.register_encoder(REMOTE_ENCODER, _encode_body)
        runtime.hub.register_encoder(REMOTE_WVP_ENCODER, _encode_resync)
        runtime.hub.register_remote_owners(self._remote_owner)
        runtime.hub.register_freshness(self._stale)
        runtime.hub.register_answer_relay(self._relay_answer)
        self._aliases = WriterAliases(runtime.new_conn_id)
        """Writers on other nodes whose requests this node's producers answer."""
        self._out: collections.deque[tuple[str, bytes]] = collections.deque()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: Any = None
        self._interest: set[str] = set()
        """Streams with local subscribers (the hub's interest hook keeps it)."""
        self._subs: dict[str, Any] = {}
        """The NATS subscription to each followed stream's frames."""

    @property
    def nats(self) -> NatsClient:
        """The cluster's NATS connection (once started), shared with ``cluster_maps``."""
        assert self._nc is not None, "the cluster link is not started"
        return self._nc

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, read every ownership entry, then follow frames, heartbeats, requests."""
        nc = self._nc = await connect(self.url, name=f"octosync-{self.node}")
        self._kv = await owners_bucket(nc, self.subjects)
        self._watcher = await self._kv.watchall()
        while True:  # the entries as they are now, before any frame is taken
            entry = await self._watcher.updates(timeout=5.0)
            if entry is None:
                break
            self._entry(entry)
        self._kept = await owners_bucket(nc, self.subjects, self.subjects.snapshots_bucket)
        await self._restore_kept()
        self._spawn(self._watch())
        for stream in sorted(self._interest):  # subscribers that came before the link
            await self._follow(stream)
        await nc.subscribe(self.subjects.heartbeat, cb=self._on_heartbeat)
        await nc.subscribe(self.subjects.snapshots(self.node), cb=self._on_request)
        await nc.subscribe(self.subjects.writes(self.node), cb=self._on_write)
        self._spawn(self._pump())
        self._spawn(self._ticker())

    async def stop(self) -> None:
        """Release what this node owns and leave (the others see the entries go); frames
        its producers still send while the server drains stay on this node."""
        self._stopping = True
        for stream in list(self.core.local_producers()):
            self._run(self.core.local_released(stream))
        await asyncio.sleep(0)  # let the releases start
        for task in list(self._tasks):
            if task.get_name() == "release":
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 2)
        for task in list(self._tasks):
            task.cancel()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.drain(), 2)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the hub's side -------------------------------------------------------------------------

    def on_accept(self, stream: StreamId, conn: ConnId, frame: Frame[Body]) -> None:
        """The hub's accept hook: a local producer's frame goes through the core."""
        body = frame.body
        if not isinstance(stream, str) or not isinstance(body, CARRIED):
            return
        if self._stopping or conn in self._remote.values():
            return
        for effect in self.core.local_frame(stream, conn):
            if isinstance(effect, Forward):
                if isinstance(body, Snapshot | Delta):  # the lazily path as it always was
                    out = wire.frame_of(self.node, stream, effect.claim, body)
                else:
                    out = wire.wvp_frame_of(self.node, stream, effect.claim, [body])
                self._send(self.subjects.frame(stream), wire.encode(out))
            elif isinstance(effect, Hold):
                if effect.first:
                    self._held[stream] = [body]
                else:
                    self._held.setdefault(stream, []).append(body)
            else:
                self._run([effect])

    def _frame_of(self, stream: str, claim: int, body: Snapshot | Delta | WvpFrame) -> ClusterFrame:
        if isinstance(body, Snapshot | Delta):
            return wire.frame_of(self.node, stream, claim, body)
        return wire.wvp_frame_of(self.node, stream, claim, [body])

    def _snapshot_frame(self, stream: str, claim: int) -> ClusterFrame | None:
        """The local hub's state of ``stream`` as one frame: a lazily snapshot, or a WVP
        stream's replay (None: no state, or a WVP replay log that overflowed)."""
        hub = self.rt.hub
        if stream_face(stream) == "lazily":
            snap = hub.latest_snapshot(stream)
            return None if snap is None else wire.frame_of(self.node, stream, claim, snap)
        bodies = [f.body for f in hub.replay_of(stream)]
        frames = [b for b in bodies if isinstance(b, wvp.WarpSnapshot | wvp.WarpDiff)]
        if not frames or len(frames) != len(bodies):
            return None
        return wire.wvp_frame_of(self.node, stream, claim, frames)

    def on_release(self, stream: StreamId, conn: ConnId) -> None:
        """The hub's release hook: the local producer of ``stream`` disconnected."""
        if isinstance(stream, str) and self.core.local_producers().get(stream) == conn:
            self._run(self.core.local_released(stream))

    def _stale(self, stream: StreamId) -> str | None:
        """Why a subscriber here must not be served ``stream`` now (NATS out of reach)."""
        if not isinstance(stream, str) or self._nc is None:
            return None
        return self.core.stale_reason(stream, linked=self._nc.is_connected)

    def _remote_owner(self, stream: StreamId, conn: ConnId | None) -> str | None:
        if not isinstance(stream, str) or conn in self._remote.values():
            return None  # the connection that stands for the owner here may produce
        return self.core.produced_elsewhere(stream)

    def on_interest(self, stream: StreamId, wanted: bool) -> None:
        """The hub's interest hook: follow a stream while it has local subscribers."""
        if not isinstance(stream, str):
            return  # the server's streams are named; nothing else crosses nodes
        if wanted:
            self._interest.add(stream)
            if self._nc is not None:
                self._spawn(self._follow(stream))
            return
        self._interest.discard(stream)
        self._run(self.core.unfollow(stream))
        sub = self._subs.pop(stream, None)
        if sub is not None:
            self._spawn(_unsubscribe(sub))

    async def _follow(self, stream: str) -> None:
        """Subscribe to the stream's frames, then let the core ask for its snapshot (frames
        published before the subscription took are covered by that snapshot)."""
        assert self._nc is not None
        if stream in self._subs:
            return
        sub = await self._nc.subscribe(self.subjects.frame(stream), cb=self._on_frame)
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self._nc.flush(timeout=1)
        if stream not in self._interest or stream in self._subs:
            await _unsubscribe(sub)  # the last subscriber left meanwhile, or a twin won
            return
        self._subs[stream] = sub
        self._run(self.core.follow(stream))

    def _run(self, effects: list[Effect]) -> None:
        for effect in effects:
            match effect:
                case Apply(frame=frame):
                    self._apply(frame)
                case DropRemote(stream=stream):
                    self._drop_remote(stream)
                case PublishHeld(stream=stream, claim=claim):
                    subject = self.subjects.frame(stream)
                    for held in self._held.pop(stream, []):
                        self._send(subject, wire.encode(self._frame_of(stream, claim, held)))
                case PublishSnapshot(stream=stream, claim=claim):
                    self._held.pop(stream, None)
                    snap_frame = self._snapshot_frame(stream, claim)
                    if snap_frame is not None:
                        self._send(self.subjects.frame(stream), wire.encode(snap_frame))
                case Kick(stream=stream, conn=conn):
                    self._held.pop(stream, None)
                    link = self.rt.links.get(conn)
                    if link is not None:
                        link.fault(
                            ForbiddenPublish(
                                f"stream {stream!r} is produced on another node", path="stream"
                            )
                        )
                case Claim(stream=stream, last=last):
                    self._spawn(self._claim(stream, last))
                case Release(stream=stream, last=last):
                    self._held.pop(stream, None)
                    self._spawn(self._release(stream, last), name="release")
                case RequestSnapshot(stream=stream, owner=owner):
                    self._spawn(self._request(stream, owner))
                case Forward() | Hold():
                    raise AssertionError("on_accept sends or holds the frame it was given")

    def _apply(self, frame: ClusterFrame) -> None:
        hub = self.rt.hub
        is_wvp = stream_face(frame.stream) == "wvp"
        conn = self._remote.get(frame.stream)
        if conn is None:
            conn = self._remote[frame.stream] = self.rt.new_conn_id()
            stream = frame.stream

            def wake(c: ConnId) -> None:  # called inside the hub: pass it on afterwards
                asyncio.get_running_loop().call_soon(self._pass_writes, stream, c)

            # WVP defines no writes: what reaches its stand-in is a subscriber's resync request
            view = REMOTE_WVP_VIEW if is_wvp else REMOTE_VIEW
            hub.connect(conn, view, grants=AllowAll(), wake=wake)
            if not is_wvp:  # writers' requests cross to the owner, whose producer answers
                hub.take_remote_ops(conn)
        try:
            if is_wvp:
                for body in wire.decode_wvp_body(frame):
                    hub.publish(conn, frame.stream, wvp_hub_frame(body))
            else:
                hub.publish(conn, frame.stream, lazily_frame(wire.decode_body(frame)))
        except OctosyncError as exc:
            log.warning(
                "cluster: a frame of %r from %s was refused: %s", frame.stream, frame.node, exc
            )
            self.core.apply_failed(frame.stream)
            self._drop_remote(frame.stream)

    def _pass_writes(self, stream: str, conn: ConnId) -> None:
        """Writes (WVP: resync requests) the hub queued for a remote owner's connection go
        to the owner's node."""
        bodies = self.rt.hub.take(conn)
        target = self.core.write_target(stream)
        if target is None:
            return
        owner, claim = target
        passed = wire.Resync if stream_face(stream) == "wvp" else wire.Write
        for body in bodies:
            self._send(
                self.subjects.writes(owner), wire.encode(passed(self.node, stream, claim, body))
            )

    async def _on_write(self, msg: Msg) -> None:
        """Another node passes a subscriber's write or WVP resync request: to this node's
        producer, if it still owns the stream under the claim the other node knew."""
        try:
            write = wire.decode(msg.data)
            if isinstance(write, wire.Answer):
                self._on_answer(write)
                return
            if not isinstance(write, wire.Write | wire.Resync):
                return
            if self.core.owns(write.stream) != write.claim:
                return
            if isinstance(write, wire.Resync):
                self.rt.hub.pass_resync(write.stream, wire.decode_resync(write))
                return
            body = wire.decode_write(write)
            if isinstance(body, RemoteOp):
                self._ask(write.node, write.stream, body)
                return
            hub = self.rt.hub
            if self._writer is None:
                self._writer = self.rt.new_conn_id()
                hub.connect(self._writer, REMOTE_VIEW, grants=AllowAll())
            hub.write(self._writer, write.stream, body)
        except OctosyncError as exc:
            log.info("cluster: a write from another node was refused: %s", exc)

    def _ask(self, node: str, stream: str, op: RemoteOp) -> None:
        """A writer's request from ``node`` (checked there) to this node's producer, under
        this node's id for the writer; the writer's node hears the outcome as it would have
        from a producer of its own."""
        peer = op.peer
        local = None if peer is None else self._aliases.alias(node, peer)
        try:
            if self.rt.hub.relay_remote_op(stream, replace(op, peer=local)):
                return  # the producer answers (``_relay_answer``)
            result = RemoteOpResult(op.request, applied=False)
        except OctosyncError as err:
            result = RemoteOpResult(op.request, error=err.name, message=err.message[:1024])
        if op.request and peer is not None:
            self._answer(node, stream, replace(result, peer=peer))

    def _relay_answer(self, stream: StreamId, result: RemoteOpResult) -> bool:
        """A producer here answers a writer of another node: to that node."""
        origin = None if result.peer is None else self._aliases.origin(result.peer)
        if origin is None or not isinstance(stream, str):
            return False
        node, peer = origin
        self._answer(node, stream, replace(result, peer=peer))
        return True

    def _answer(self, node: str, stream: str, result: RemoteOpResult) -> None:
        body = wire.encode_body(result)
        self._send(self.subjects.writes(node), wire.encode(wire.Answer(self.node, stream, body)))

    def _on_answer(self, answer: wire.Answer) -> None:
        """The owner's producer answered a writer here: through the stream's stand-in, the
        producer as this node's hub knows it."""
        conn = self._remote.get(answer.stream)
        if conn is not None:
            self.rt.hub.answer(conn, answer.stream, wire.decode_answer(answer))

    def _drop_remote(self, stream: str) -> None:
        conn = self._remote.pop(stream, None)
        if conn is not None:
            self.rt.hub.disconnect(conn)

    # --- NATS's side ----------------------------------------------------------------------------

    def _send(self, subject: str, data: bytes) -> None:
        self._out.append((subject, data))
        self._wake.set()

    async def _pump(self) -> None:
        """Publish in the order the hub accepted (one task, so one order)."""
        assert self._nc is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._out:
                subject, data = self._out.popleft()
                try:
                    await self._nc.publish(subject, data)
                except nats.errors.Error as exc:
                    # Closed, or its reconnect buffer is full: this frame is lost to the
                    # other nodes, who see the gap at the next frame or heartbeat and resync.
                    log.warning("cluster: a publish on %s failed: %s", subject, exc)

    async def _on_frame(self, msg: Msg) -> None:
        try:
            frame = wire.decode(msg.data)
        except OctosyncError as exc:
            log.warning("cluster: undecodable frame on %s: %s", msg.subject, exc)
            return
        if isinstance(frame, ClusterFrame):
            self._run(self.core.remote_frame(frame))

    async def _on_heartbeat(self, msg: Msg) -> None:
        with contextlib.suppress(OctosyncError):
            beat = wire.decode(msg.data)
            if isinstance(beat, Heartbeat):
                owned = {
                    s: (load.claim, load.epoch)
                    for s, load in beat.streams.items()
                    if load.claim and load.epoch is not None
                }
                if beat.topgun:
                    self._topgun_urls[beat.node] = beat.topgun
                self._run(self.core.heartbeat(beat.node, owned, beat.released))

    async def _on_request(self, msg: Msg) -> None:
        """Another node asks for a stream's snapshot: from this hub, if this node owns it."""
        try:
            req = wire.decode(msg.data)
        except OctosyncError:
            return
        if not isinstance(req, SnapshotRequest):
            return
        claim = self.core.owns(req.stream)
        snap = None if claim is None else self._snapshot_frame(req.stream, claim)
        answer: wire.ClusterMessage = NoSnapshot(self.node, req.stream) if snap is None else snap
        await msg.respond(wire.encode(answer))

    async def _request(self, stream: str, owner: str) -> None:
        assert self._nc is not None
        request = wire.encode(SnapshotRequest(self.node, stream))
        try:
            reply = await self._nc.request(
                self.subjects.snapshots(owner), request, timeout=REQUEST_TIMEOUT
            )
            answer = wire.decode(reply.data)
        except (OctosyncError, nats.errors.Error, TimeoutError) as exc:
            log.info("cluster: no snapshot of %r from %s: %s", stream, owner, exc)
            return
        if isinstance(answer, ClusterFrame) and answer.stream == stream:
            self._run(self.core.snapshot_reply(stream, answer))

    async def _claim(self, stream: str, last: int) -> None:
        assert self._kv is not None
        key, value = token(stream), self.node.encode()
        try:
            if last == 0:
                revision: int | None = await self._kv.create(key, value)
            else:
                revision = await self._kv.update(key, value, last=last)
        except Exception as exc:  # a lost compare-and-set (or NATS unreachable): refused
            log.info("cluster: claim of %r lost: %s", stream, exc)
            revision = None
        self._run(self.core.claim_result(stream, revision))

    async def _release(self, stream: str, last: int) -> None:
        assert self._kv is not None
        try:
            await self._kv.delete(token(stream), last=last)
        except Exception as exc:  # moved on already: someone else owns it now
            log.info("cluster: release of %r skipped: %s", stream, exc)

    async def _watch(self) -> None:
        async for entry in self._watcher:
            if entry is not None:
                self._entry(entry)

    def _entry(self, entry: Any) -> None:
        try:
            stream = stream_of(entry.key)
        except ValueError:
            return
        deleted = entry.operation in ("DEL", "PURGE") or not entry.value
        owner = None if deleted else bytes(entry.value).decode()
        self._run(self.core.ownership(stream, owner, int(entry.revision)))

    async def _ticker(self) -> None:
        period = self.core.timing.heartbeat_every
        step = min(0.1, period)
        beats = max(1, round(period / step))
        n = 0
        while True:
            try:
                self._run(self.core.tick())
                if n % beats == 0:
                    self._send(self.subjects.heartbeat, wire.encode(self.heartbeat()))
                    self._keep_snapshots()
            except Exception:  # one bad round must not stop the heartbeats for good
                log.exception("cluster: a heartbeat round failed")
            n += 1
            await asyncio.sleep(step)

    def _keep_snapshots(self) -> None:
        """Owned streams whose epoch moved: their snapshot into JetStream (for nodes that
        start after this one is gone)."""
        hub = self.rt.hub
        epochs = {s: hub.epoch_of(s) for s in self.core.streams}
        for stream in self.core.checkpoints_due(epochs):
            claim = self.core.owns(stream)
            snap = None if claim is None else self._snapshot_frame(stream, claim)
            if snap is not None:
                self._spawn(self._put_kept(stream, wire.encode(snap)))

    async def _put_kept(self, stream: str, data: bytes) -> None:
        assert self._kept is not None
        try:
            await self._kept.put(token(stream), data)
        except Exception as exc:  # NATS away: the next epoch change tries again
            log.info("cluster: the snapshot of %r was not kept: %s", stream, exc)

    async def _restore_kept(self) -> None:
        """At start: streams this hub holds no state for get the snapshot kept in JetStream."""
        assert self._kept is not None
        try:
            keys = await self._kept.keys()
        except Exception:  # nats-py raises when the bucket is empty
            return
        hub = self.rt.hub
        for key in keys:
            try:
                entry = await self._kept.get(key)
                frame = wire.decode(entry.value or b"")
                if not isinstance(frame, ClusterFrame) or hub.epoch_of(frame.stream) is not None:
                    continue
                if stream_face(frame.stream) == "wvp":
                    hub.restore(
                        frame.stream, [wvp_hub_frame(b) for b in wire.decode_wvp_body(frame)]
                    )
                else:
                    hub.restore(frame.stream, [lazily_frame(wire.decode_body(frame))])
            except Exception as exc:  # a bad or vanished entry: the others are still restored
                log.warning("cluster: a kept snapshot could not be restored: %s", exc)

    def heartbeat(self) -> Heartbeat:
        hub = self.rt.hub
        streams = {}
        for sid in hub.stream_ids():
            if isinstance(sid, str):
                streams[sid] = StreamLoad(
                    hub.epoch_of(sid), len(hub.subscribers_of(sid)), self.core.owns(sid) or 0
                )
        conns = hub.connection_count() - len(self._remote) - (self._writer is not None)
        return Heartbeat(
            self.node,
            self.public_url,
            streams,
            conns,
            self.core.released_claims(),
            self.topgun_url,
            *_listed(self.documents),
            *_listed(self.maps),
        )

    def topgun_nodes(self) -> list[tuple[str, str]]:
        """The nodes alive now with their TopGun URL (this one first), for the partition
        map: a node is left out until a heartbeat said where it is."""
        nodes = [(self.node, self.topgun_url)]
        for node in self.core.nodes_alive():
            url = self._topgun_urls.get(node)
            if node != self.node and url:
                nodes.append((node, url))
        return nodes


def _listed(held: Callable[[], list[str]] | None) -> tuple[int, list[str]]:
    """How many documents (or maps) this node holds, and the first ``MAX_LISTED`` names."""
    if held is None:
        return 0, []
    names = held()
    return len(names), names[:MAX_LISTED]


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(nats.errors.Error):
        await sub.unsubscribe()


def _encode_body(frame: OutFrame) -> bytes:
    body = frame.body
    if not isinstance(body, Snapshot | Delta | RemoteOp):
        raise TypeError(f"{type(body).__name__} is not a lazily state-plane message")
    return wire.encode_body(body)


def _encode_resync(frame: OutFrame) -> bytes:
    """A subscriber's resync request, for the remote owner's node (nothing else goes there)."""
    body = frame.body
    if frame.kind != "resync" or not isinstance(body, wvp.ResyncRequest):
        raise TypeError(f"only resync requests go to a remote owner of {frame.stream!r}")
    return wvp.encode(body, frame.ts)


def wvp_hub_frame(body: WvpFrame) -> Frame[Body]:
    """The hub frame for a WVP stream frame, as the WVP session makes it."""
    if isinstance(body, wvp.WarpSnapshot):
        return SnapshotFrame(body.epoch, body, body.state_hash)
    return DiffFrame(body.from_epoch, body.to_epoch, body, body.state_hash)


def default_node_id() -> str:
    """The host name and process id, as a node id."""
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40] or "node"
    return f"{host}-{os.getpid()}"
