"""The state plane over a WebRTC data channel (aiortc): peers meet through ``/signal``.

Two peers of one signaling session connect: the offerer makes an ordered, reliable data
channel named ``lazily``, sends its SDP offer through the relay, the answerer replies, and each
side forwards its ICE candidates (``ice`` frames; aiortc gathers before it writes its SDP, so
they are also in it). Over the channel runs the same state plane as over a socket, one message
per channel message in the seed's JSON dialect: both sides send a ``Handshake`` first and
negotiate (``ipc.handshake``); then the producer sends a snapshot and a delta per flush, the
subscriber's mirror applies them and answers a gap with a ``ResyncRequest``, which the producer
answers with a fresh snapshot; ``CrdtSync`` frames go to a callback.

``host_addresses`` pins the host candidates aiortc gathers (aioice leaves loopback out, and
aiortc has no interface filter): ``("127.0.0.1",)`` keeps two peers on one machine off the
network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aioice.ice
import msgspec
from aiortc import RTCDataChannel, RTCPeerConnection, RTCSessionDescription
from aiortc.sdp import candidate_from_sdp

from octosync.client.lazily import _handshake as socket_handshake
from octosync.client.signaling import SignalingClient
from octosync.errors import HandshakeFailed, ProtocolError
from octosync.graph import Context
from octosync.ipc.handshake import negotiate
from octosync.ipc.messages import CrdtSync, Delta, Handshake, ResyncRequest, Snapshot
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Publisher
from octosync.signaling.messages import AnswerFrom, IceFrom, OfferFrom
from octosync.wire import json as wire_json

CHANNEL = "lazily"
MAX_MESSAGE = 256 * 1024
"""SCTP messages above this size are not portable between WebRTC stacks."""


@contextlib.contextmanager
def host_addresses(addresses: Sequence[str] | None) -> Iterator[None]:
    """Within the block, aiortc gathers host candidates on ``addresses`` only (None: as is)."""
    if addresses is None:
        yield
        return
    real = aioice.ice.get_host_addresses
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: list(addresses)
    try:
        yield
    finally:
        aioice.ice.get_host_addresses = real


@dataclass
class PeerLink:
    """One peer connection and its data channel, as a queue of messages each way."""

    pc: RTCPeerConnection
    channel: RTCDataChannel | None = None
    inbox: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def _attach(self, channel: RTCDataChannel) -> None:
        self.channel = channel

        @channel.on("message")
        def _on_message(data: bytes | str) -> None:
            self.inbox.put_nowait(data.encode() if isinstance(data, str) else data)

        @channel.on("close")
        def _on_close() -> None:
            self.closed.set()

        if channel.readyState == "open":
            self.opened.set()
        else:
            channel.on("open", self.opened.set)

    def send(self, data: bytes) -> None:
        if self.channel is None or self.channel.readyState != "open":
            raise ConnectionError("the data channel is not open")
        if len(data) > MAX_MESSAGE:
            raise ProtocolError(f"a message of {len(data)} bytes is too large for the channel")
        self.channel.send(data)

    async def receive(self, timeout: float | None = None) -> bytes:
        getter = asyncio.ensure_future(self.inbox.get())
        closer = asyncio.ensure_future(self.closed.wait())
        try:
            done, _ = await asyncio.wait(
                {getter, closer}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            closer.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        if closer in done:
            raise ConnectionError("the data channel closed")
        raise TimeoutError("nothing arrived on the data channel")

    async def close(self) -> None:
        await self.pc.close()
        self.closed.set()


async def _exchange_candidates(sig: SignalingClient, to: int, pc: RTCPeerConnection) -> None:
    """Send our gathered candidates as ``ice`` frames (also present in the SDP)."""
    desc = pc.localDescription
    for line in desc.sdp.splitlines():
        if line.startswith("a=candidate:"):
            await sig.ice(to, line[2:])


async def _signals_until(
    sig: SignalingClient, pc: RTCPeerConnection, want: type, timeout: float
) -> Any:
    """Read signaling frames, applying ``ice`` ones, until one of type ``want``."""
    while True:
        frame = await sig.receive(timeout)
        if isinstance(frame, want):
            return frame
        if isinstance(frame, IceFrom) and pc.remoteDescription is not None:
            candidate = candidate_from_sdp(frame.candidate.removeprefix("candidate:"))
            candidate.sdpMLineIndex = 0  # one m= line: the data channel
            with contextlib.suppress(Exception):  # already known from the SDP
                await pc.addIceCandidate(candidate)


async def offer(
    sig: SignalingClient,
    to: int,
    *,
    hosts: Sequence[str] | None = None,
    timeout: float = 30.0,
) -> PeerLink:
    """Call peer ``to`` of the signaling session; returns once the channel is open."""
    pc = RTCPeerConnection()
    link = PeerLink(pc)
    link._attach(pc.createDataChannel(CHANNEL, ordered=True))
    with host_addresses(hosts):
        await pc.setLocalDescription(await pc.createOffer())
    await sig.offer(to, pc.localDescription.sdp)
    await _exchange_candidates(sig, to, pc)
    answer: AnswerFrom = await _signals_until(sig, pc, AnswerFrom, timeout)
    await pc.setRemoteDescription(RTCSessionDescription(answer.sdp, "answer"))
    await asyncio.wait_for(link.opened.wait(), timeout)
    return link


async def answer(
    sig: SignalingClient, *, hosts: Sequence[str] | None = None, timeout: float = 30.0
) -> tuple[int, PeerLink]:
    """Wait for a peer's offer and accept it: ``(its peer id, the open link)``."""
    pc = RTCPeerConnection()
    link = PeerLink(pc)
    pc.on("datachannel", link._attach)
    got: OfferFrom = await _signals_until(sig, pc, OfferFrom, timeout)
    await pc.setRemoteDescription(RTCSessionDescription(got.sdp, "offer"))
    with host_addresses(hosts):
        await pc.setLocalDescription(await pc.createAnswer())
    await sig.answer(got.from_, pc.localDescription.sdp)
    await _exchange_candidates(sig, got.from_, pc)
    await asyncio.wait_for(link.opened.wait(), timeout)
    return got.from_, link


def handshake(session: str, peer: int, *, publish: bool) -> Handshake:
    """A socket client's handshake, with this side's peer id and the channel's message cap."""
    return msgspec.structs.replace(
        socket_handshake(session, publish=publish, max_frame=MAX_MESSAGE), peer_id=peer
    )


async def _shake(link: PeerLink, local: Handshake, timeout: float) -> None:
    link.send(wire_json.encode_handshake(local))
    remote = wire_json.decode_handshake(await link.receive(timeout))
    negotiate(local, remote)  # HandshakeFailed names the field
    if ("publish" in local.features) == ("publish" in remote.features):
        raise HandshakeFailed("exactly one side of a data channel publishes", path="features")


async def publish_context(
    link: PeerLink,
    session: str,
    ctx: Context,
    *,
    peer: int = 1,
    permissions: PeerPermissions | None = None,
    on_crdt: Callable[[CrdtSync], None] | None = None,
    timeout: float = 30.0,
) -> None:
    """Serve ``ctx`` over the link until it closes: a snapshot, a delta per flush, a fresh
    snapshot for each resync request."""
    await _shake(link, handshake(session, peer, publish=True), timeout)
    publisher = Publisher(ctx, permissions or PeerPermissions.allow_all())
    changed = asyncio.Event()
    unsubscribe = ctx.subscribe(lambda _changes: changed.set())

    async def read() -> None:
        while True:
            msg = wire_json.decode(await link.receive())
            if isinstance(msg, ResyncRequest):
                link.send(wire_json.encode(publisher.snapshot()))
                publisher.drain()
            elif isinstance(msg, CrdtSync) and on_crdt is not None:
                on_crdt(msg)

    reader = asyncio.ensure_future(read())
    try:
        link.send(wire_json.encode(publisher.snapshot()))
        publisher.drain()
        while not reader.done():
            waiter = asyncio.ensure_future(changed.wait())
            await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            changed.clear()
            for delta in publisher.drain():
                link.send(wire_json.encode(delta))
        reader.result()
    finally:
        unsubscribe()
        publisher.close()
        reader.cancel()


async def follow(
    link: PeerLink,
    session: str,
    on_state: Callable[[Mirror], None],
    *,
    peer: int = 2,
    on_crdt: Callable[[CrdtSync], None] | None = None,
    on_resync: Callable[[ResyncRequest], None] | None = None,
    timeout: float = 30.0,
) -> Mirror:
    """Mirror the peer's state until the link closes; ``on_state`` after each applied frame,
    ``on_resync`` for each resync request sent (the mirror lost sync)."""
    await _shake(link, handshake(session, peer, publish=False), timeout)
    mirror = Mirror()
    try:
        while True:
            msg = wire_json.decode(await link.receive())
            if isinstance(msg, CrdtSync):
                if on_crdt is not None:
                    on_crdt(msg)
                continue
            result = mirror.apply(msg)
            if isinstance(result, ResyncRequest):
                link.send(wire_json.encode(result))
                if on_resync is not None:
                    on_resync(result)
            elif isinstance(msg, Snapshot | Delta) and mirror.in_sync:
                on_state(mirror)
    except ConnectionError:
        return mirror


__all__ = ["PeerLink", "answer", "follow", "offer", "publish_context"]
