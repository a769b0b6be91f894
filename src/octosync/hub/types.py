"""The hub's vocabulary: ids, views, out-frames, grants, hooks and configuration."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from octosync.hub.limits import Limits
from octosync.hub.model import Body, Frame
from octosync.hub.node_views import NodeRules
from octosync.hub.outbox import OutboxLimits
from octosync.stream_names import Face

StreamId = Hashable
ConnId = int
Action = Literal["read", "publish", "write", "trigger_effect"]
GLOBAL_SCOPE = "$global"
"""The pseudo-stream a message to every connection of a face needs ``publish`` on. Grants for
names starting with ``$`` are never implied by a wildcard."""


@dataclass(frozen=True, slots=True)
class ViewKey:
    """What a subscriber's bytes depend on: its face, its encoder and its permission view.

    ``face`` is the stream namespace the connection may name (``hub.streams``: the authority
    reads it, never the encoder's spelling). ``encoder`` names a registered encoder, which is
    one wire dialect plus the transport's framing (``lazily-json/ws``, ``lazily-msgpack/tcp``,
    ``wvp/ws``).
    """

    face: Face
    encoder: str
    view: str = "all"


@dataclass(frozen=True, slots=True)
class OutFrame:
    """One frame as handed to an encoder: the stream, the (view-filtered) body, its kind."""

    stream: StreamId
    kind: Literal["snapshot", "diff", "write", "resync", "answer"]
    epoch: int
    body: object
    ts: int


Encoder = Callable[[OutFrame], bytes]


class StreamView(Protocol):
    """What one stream's frames look like in a permission view; fed each frame in order, so
    it may keep state (which nodes are visible, the last epoch it showed)."""

    def live(self, body: object) -> object | None:
        """A frame for the view's shared log; ``None``: nothing visible, frame skipped."""

    def replay(self, body: object) -> object | None:
        """A frame that brings one joiner to where the view's log stands."""


ViewFactory = Callable[[], StreamView]
"""Makes a view's state for one stream (``hub.register_view``)."""


class Grants(Protocol):
    def allows(self, stream: StreamId, action: Action) -> bool: ...


@runtime_checkable
class NodeGrants(Protocol):
    """Grants that may narrow a stream to some of its nodes (``hub.node_views``)."""

    def node_rules(self, stream: StreamId) -> NodeRules | None: ...


class AllowAll:
    """Grants for ``--insecure-dev`` and tests: every action on every stream."""

    def allows(self, stream: StreamId, action: Action) -> bool:
        return True


AcceptHook = Callable[[StreamId, ConnId, Frame[Body]], None]
ReleaseHook = Callable[[StreamId, ConnId], None]
"""Called when ``conn`` stops producing the stream (it disconnected)."""
RemoteOwner = Callable[[StreamId, ConnId | None], str | None]
"""The node that produces the stream elsewhere in a cluster (None: nobody, or ``conn`` is the
connection that stands for that node here)."""
InterestHook = Callable[[StreamId, bool], None]
"""Called when a stream gets its first subscriber (True) or loses its last (False)."""


RecordCommit = Callable[[], None]
"""A prepared record's commit: submits it to the journal (``Recorder.prepare``)."""


class Recorder(Protocol):
    """Durable storage of accepted frames (the journal), in two steps around the hub's own.

    ``prepare`` runs before the hub changes anything and raises to refuse a frame that could
    not be stored; what it returns, the frame's commit, is called once the frame is accepted,
    before it is fanned out (and never when the hub refuses it after all). ``prepare_drop``
    does the same for dropping a stream's state (its producer left and the retention passed),
    so a restart does not bring back what the hub had let go.
    """

    def prepare(self, stream: StreamId, conn: ConnId, frame: Frame[Body]) -> RecordCommit: ...

    def prepare_drop(self, stream: StreamId) -> RecordCommit: ...


@dataclass(frozen=True, slots=True)
class HubConfig:
    outbox: OutboxLimits = field(default_factory=OutboxLimits)
    limits: Limits = field(default_factory=Limits)
    retain_after_producer_leaves: float | None = 300.0
    """Seconds a stream's last state outlives its producer; 0 drops it at once, None keeps it."""
    max_replay_diffs: int = 1024
    producer_lease: float | None = None
    """Seconds a producer holds its stream without publishing; after that another connection
    may take it over with a snapshot. None: held until the producer leaves or hands it over."""
    verify_warp_hashes: bool = False
    """Follow each WVP stream's reference render graph and refuse a frame whose
    ``state_hash`` disagrees with it (``Desync``), before any subscriber sees it."""
    resync_interval: float = 1.0
    """Seconds between two resync requests the hub forwards to one stream's producer."""
    coalesce_backlog: bool = False
    """Replace a subscriber's backlog of deltas by one snapshot when that is smaller.

    Off by default: subscribers then see every delta (only a reset skips some); on, a slow
    subscriber converges with fewer bytes but does not observe every intermediate state."""


@dataclass(slots=True)
class HubStats:
    frames_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    encodes: int = 0
    drops: int = 0
    resets: int = 0
    rejected: int = 0
    coalesced: int = 0
    """Queued deltas replaced by one snapshot of the state they lead to."""
