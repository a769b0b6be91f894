"""What each face's session may call: narrow ports instead of the whole runtime.

A session is bytes in, core calls and bytes out; these protocols name exactly the core calls
and the ways out each face has: a session sees of the hub only ``SessionHub`` and of TopGun's
core only ``SessionTopGun``, the calls it makes. ``server.runtime.Runtime`` implements WVP's
port, each face's state (``Face.state``) the others: ``server.lazily_state.LazilyState``,
``server.signal_state.SignalState``, ``server.dataspace_state.DataspaceState`` and
``server.topgun_face.TopGunFace``; a test gives a session a fake port
and feeds it bytes (``tests/server/test_ports.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Protocol

from octosync.cluster.maps import MapStats
from octosync.crdt.hlc import HLC
from octosync.errors import OctosyncError
from octosync.hub.model import Body, Frame
from octosync.hub.types import ConnId, Grants, StreamId, ViewFactory, ViewKey
from octosync.ipc.messages import Delta, RemoteOp, RemoteOpResult, Snapshot
from octosync.refresh.device_tokens import Binding
from octosync.server.auth import ClaimGrants
from octosync.server.durable_acks import DurableListener
from octosync.server.face_names import FaceName
from octosync.server.plane import Plane
from octosync.server.shared_blobs import ServerBlobs
from octosync.signaling import SignalingHub
from octosync.store.commit_path import CommitPath
from octosync.store.records import EncodedRecord
from octosync.syndicate import Relay
from octosync.topgun import Effects, Outbound
from octosync.topgun import Grants as TopGunGrants
from octosync.topgun.offload import OffLoop
from octosync.wire import topgun as tg


class LiveConnection(Protocol):
    """What the runtime needs of a connection (``server.connection.ServedConnection``)."""

    @property
    def transport(self) -> asyncio.BaseTransport: ...

    @property
    def session_face(self) -> FaceName: ...

    @property
    def deflate(self) -> bool:
        """Takes permessage-deflate frames (``wire.websocket.FrameDeflater``'s)."""

    def fault(self, err: OctosyncError) -> None: ...

    def close_soon(self, code: int) -> None: ...

    async def close(self, code: int) -> None: ...

    def abort(self) -> None: ...


class Credentials(Protocol):
    """Every face: who a token is (the server's keys), and the frame limit."""

    @property
    def max_frame(self) -> int:
        """The server's frame limit (a handshake may lower it, never raise it)."""
        ...

    def authenticate(self, token: str | None) -> ClaimGrants:
        """The identity presenting ``token`` (None: none), or ``Unauthorized``."""
        ...


class Delivery(Protocol):
    """Bytes for another connection, written now (a peer that cannot keep up is dropped)."""

    def deliver(self, conn: int, *data: bytes) -> None: ...


class SessionHub(Protocol):
    """What the lazily and WVP sessions call on the hub (``hub.Hub`` is one): connections,
    streams, frames and notices, and nothing of its configuration, stats or cluster side."""

    def register_view(self, name: str, view: ViewFactory, *, overwrite: bool = True) -> None: ...

    def next_ts(self) -> int:
        """Hub-wide monotonic counter (WVP's ``ts``)."""
        ...

    def connect(
        self,
        conn: ConnId,
        view: ViewKey,
        *,
        grants: Grants | None = None,
        wake: Callable[[ConnId], None] | None = None,
    ) -> None: ...

    def change_view(self, conn: ConnId, view: ViewKey) -> None: ...

    def disconnect(self, conn: ConnId) -> None: ...

    def check_stream(self, view: ViewKey, stream_id: StreamId) -> None: ...

    def check_join(self, grants: Grants, stream_id: StreamId, *, publish: bool) -> None: ...

    def publish(self, conn: ConnId, stream_id: StreamId, frame: Frame[Body]) -> None: ...

    def producer_of(self, stream: StreamId) -> ConnId | None: ...

    def epoch_of(self, stream: StreamId) -> int | None: ...

    def needs_snapshot(self, stream: StreamId) -> bool: ...

    def subscribe(self, conn: ConnId, stream_id: StreamId) -> None: ...

    def resync(self, conn: ConnId, stream_id: StreamId) -> None: ...

    def request_resync(self, conn: ConnId, stream_id: StreamId, body: object) -> ConnId | None: ...

    def hand_over(self, conn: ConnId, stream_id: StreamId, to: ConnId) -> None: ...

    def write(
        self, conn: ConnId, stream_id: StreamId, body: object, subject: str | None = None
    ) -> ConnId: ...

    def remote_op(
        self, conn: ConnId, stream_id: StreamId, op: RemoteOp, subject: str | None = None
    ) -> bool: ...

    def answer(self, conn: ConnId, stream_id: StreamId, result: RemoteOpResult) -> bool: ...

    def take_remote_ops(self, conn: ConnId) -> None: ...

    def notify(
        self, conn: ConnId, stream_id: StreamId | None, data: Mapping[str, bytes]
    ) -> list[ConnId]: ...

    def send_control(self, conn: ConnId, data: bytes) -> None: ...


class SessionTopGun(Protocol):
    """What a TopGun session calls on the core (``topgun.TopGunCore`` is one): a connection's
    life, its messages, and the clock and node id its handshake answers with."""

    @property
    def clock(self) -> Callable[[], int]: ...

    @property
    def hlc(self) -> HLC: ...

    def connect(self, conn: int, grants: TopGunGrants) -> None: ...

    def handle(self, conn: int, message: tg.Message) -> Effects: ...

    def disconnect(self, conn: int) -> Effects: ...

    def error(self, err: OctosyncError) -> tg.Error: ...


class HubPort(Credentials, Protocol):
    """The lazily and WVP faces: the hub, and the flusher's wake-up for a connection
    (``server.runtime.Runtime`` is one)."""

    @property
    def hub(self) -> SessionHub: ...

    @property
    def journaled(self) -> bool:
        """Accepted frames are journaled (so producers may ask for durability acks)."""
        ...

    @property
    def durable_listeners(self) -> MutableMapping[int, DurableListener]:
        """Producers that asked to learn how far their frames are journaled."""
        ...

    def wake(self, conn: int) -> None:
        """The hub queued bytes for ``conn``: the flusher writes them this loop turn."""
        ...


class LazilyPort(HubPort, Protocol):
    """The lazily face (``server.lazily_state.LazilyState``): the hub's calls, plus the
    shared documents, the shared-memory region and streams other faces make."""

    @property
    def plane(self) -> Plane:
        """The multi-writer (CRDT plane) streams."""
        ...

    @property
    def blobs(self) -> ServerBlobs:
        """Shared-memory payloads (``shared_blob``): the regions producers negotiated."""
        ...

    def follow_stream(self, stream: str) -> None:
        """A subscriber asked for ``stream``: a face that makes it (``map:NAME``) starts."""
        ...


class SignalPort(Credentials, Delivery, Protocol):
    """The signaling face: rooms and relay rules."""

    @property
    def signaling(self) -> SignalingHub: ...


class DataspacePort(Credentials, Delivery, Protocol):
    """The dataspace face: the Syndicate relay, and each connection's transport framing."""

    @property
    def relay(self) -> Relay: ...

    @property
    def relay_framing(self) -> MutableMapping[int, Callable[[bytes], bytes]]: ...

    def check_activity_room(self) -> None:
        """Raise when the journal could not record a turn's activity now."""
        ...

    def record_activity(self) -> None:
        """Journal what the dataspaces took since the last call."""
        ...


class Replicator(Protocol):
    """Stores TopGun op records in the cluster (``links.cluster_maps.MapsLink``)."""

    @property
    def stats(self) -> MapStats: ...

    @property
    def position(self) -> int:
        """The cluster op stream's sequence this node has taken up to."""
        ...

    def replicate(
        self, conn: int, records: Sequence[EncodedRecord], then: Callable[[], None] | None
    ) -> None: ...


class TopGunPort(Credentials, Delivery, Protocol):
    """The TopGun face: its core, the journal and cluster it waits for, its fan-out."""

    @property
    def topgun(self) -> SessionTopGun: ...

    @property
    def commits(self) -> CommitPath:
        """The one commit path: the storage rules, the journal, after-commit effects."""
        ...

    @property
    def replicator(self) -> Replicator | None: ...

    @property
    def insecure_dev(self) -> bool:
        """Token-less clients are admitted (``DEVICE_HELLO``); no ``AUTH_REQUIRED`` greeting."""
        ...

    def deliver_all(self, out: Sequence[Outbound]) -> None:
        """Messages for other connections, framed once (deflated once where shared)."""
        ...

    def flush_soon(self) -> None:
        """Send the events applied so far, all at once, soon (``topgun_face.FLUSH_GAP``)."""
        ...

    def publish_map_frames(self, frames: Sequence[tuple[str, Snapshot | Delta]]) -> None:
        """The ``map:`` streams' frames the core made, into the hub."""
        ...

    def apply(self, fx: Effects) -> None:
        """Effects no session sends (a disconnect, expiry, the GC): out now, durable later."""
        ...

    def offload(self, job: OffLoop) -> None:
        """Run a request's work on a worker thread; its answer goes to its connection."""
        ...

    def bind_device(
        self, subject: str | None, presented: str | None, then: Callable[[Binding | None], None]
    ) -> None:
        """Re-bind the device ``presented`` names, or mint one, for ``subject`` (None: the
        anonymous namespace), off the loop; ``then`` on the loop with the binding, or None
        when the credential store failed (the connection goes on without a device id)."""
        ...
