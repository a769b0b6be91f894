"""What a TopGun step wants done, as typed values: the core decides, the server encodes and sends.

Messages leave the core as ``wire.topgun`` messages (or the two shapes below that the server
encodes by a faster path: an ``OP_ACK`` whose every op succeeded, and runs of events joined
into one ``SERVER_BATCH_EVENT``); ``server.topgun_wire`` turns them into bytes, once per
message whatever the number of connections it goes to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from octosync.ipc.messages import Delta, Snapshot
from octosync.store.records import EncodedRecord
from octosync.topgun.offload import OffLoop
from octosync.wire import topgun as tg


class Grants(Protocol):
    """What the core asks of a connection's identity (``server.auth.ClaimGrants``)."""

    @property
    def subject(self) -> str: ...

    def may_map(self, name: str, action: str) -> bool: ...

    def may_topic(self, name: str, action: str) -> bool: ...

    def may_lock(self, name: str) -> bool: ...

    def may_counter(self, name: str, action: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class AllSucceeded:
    """The ``OP_ACK`` of a batch whose every op succeeded at ``level``: one result per id."""

    last_id: str
    level: str
    op_ids: list[str]


@dataclass(frozen=True, slots=True, eq=False)
class EventRun:
    """One client batch's events, in order: encoded once, shared by every message that
    carries them (identity, not equality, is what the encoder remembers)."""

    events: list[tg.ServerEventPayload]


@dataclass(frozen=True, slots=True)
class EventRuns:
    """The ``SERVER_EVENT`` (one event) or ``SERVER_BATCH_EVENT`` carrying the runs' events
    in order."""

    runs: Sequence[EventRun]


Wire = tg.Message | AllSucceeded | EventRuns
"""What the server encodes into one MsgPack message."""


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message and the connections it goes to."""

    targets: tuple[int, ...]
    message: Wire


@dataclass(slots=True)
class Effects:
    """What one step wants: ``out`` goes now, ``records`` must be journaled, and ``durable``
    goes only once those records (and every record queued before them) are committed."""

    out: list[Outbound] = field(default_factory=list)
    records: list[EncodedRecord] = field(default_factory=list)
    durable: list[Outbound] = field(default_factory=list)
    """Sent once ``records`` and everything journaled before them are committed."""
    frames: list[tuple[str, Snapshot | Delta]] = field(default_factory=list)
    """For the lazily stream of each named map (``map:<name>``), in order."""
    replicate: list[EncodedRecord] = field(default_factory=list)
    """Op records for the cluster's op stream (only with ``TopGunCore.replicated``)."""
    replicated: list[Outbound] = field(default_factory=list)
    """Sent once ``replicate`` is stored by the cluster (``REPLICATED`` acks); ``durable``
    waits for that too when ``replicate`` is not empty."""
    offload: list[OffLoop] = field(default_factory=list)
    """Work for a worker thread (SQL), whose answer the server sends when it is done."""

    def send(self, conn: int, message: Wire) -> None:
        self.out.append(Outbound((conn,), message))
