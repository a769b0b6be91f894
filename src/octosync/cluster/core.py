"""What crosses NATS between octosync nodes, and when: the cluster's rules, sans-I/O.

A node's hub stays the one place that decides what a stream accepts; this core only decides
what goes to, and comes from, the other nodes. Its inputs are events (a frame the local hub
accepted, a frame from NATS, an ownership entry from JetStream KV, a heartbeat, a tick with
the injected time); its outputs are effects the I/O side performs (``links/cluster_link.py``).

Decisions:

- **Ownership is a JetStream KV entry per stream** (value: the owner's node id). A node claims
  a stream when its hub accepts the first frame of a local producer, by compare-and-set on the
  entry's revision (create when free; update over the last revision when the recorded owner
  is this node or a node presumed dead). A live owner is never overwritten; a lost race kicks
  the local producer with ``ForbiddenPublish``. The owner deletes the entry (again by
  revision) when its producer leaves.
- **The claim revision fences frames.** Every frame carries the revision of its owner's claim;
  a node drops frames with an older revision than it knows (a stale owner that was presumed
  dead), and adopts a newer one as soon as a frame or the KV watch shows it, whichever comes
  first.
- **Heartbeats also carry each owned stream's claim and epoch**, so a node whose copy stays
  behind for ``retry_after`` (the frames that would have shown the gap were lost and the
  producer went quiet) asks for a snapshot too.
- **Node loss is seen by heartbeats**, not by entry TTLs (NATS does not tell watchers when an
  entry ages out): every node publishes a heartbeat each ``heartbeat_every`` seconds; a node
  silent for ``dead_after`` is presumed dead, its streams stop having a remote producer here
  (their last state is kept by the hub's own retention), and a local producer may take them
  over by compare-and-set on the dead owner's revision. Nodes never heard of are given
  ``dead_after`` from this core's start.
- **A node follows a stream only while it has local subscribers** (the hub's interest hook
  says when the first arrives and the last leaves): it takes that stream's frames and asks
  the owner for a snapshot at once; when the last subscriber leaves it drops the remote
  producer and ignores the stream's frames, so a node applies only what it serves. Ownership
  entries are watched for every stream (they are small), so a node knows every owner, routes
  writes, and can take a stream over without following it first.
- **The owner publishes each accepted frame once**, as the bytes encoded once (``wire.cluster``
  frames). Frames a producer sends while its node's claim is pending are held (its snapshot
  first) and published in order once the claim is won, so subscribers on every node see every
  delta; past ``max_held`` the owner publishes its hub's snapshot instead.
- **Writes follow ownership**: a subscriber's write on a node whose hub holds a remote owner's
  producer connection goes (after that hub checked the grant) to the owner's node, addressed
  to the claim it knew; the owner passes it to its producer only while that claim is its own.
- **The owner keeps its stream's snapshot in JetStream** (a KV entry per stream, written on a
  heartbeat when the epoch moved), so a node that starts after the owner is gone still
  serves the stream's last state (installed like state recovered from a journal: no
  producer, until one claims it). While the owner lives, snapshots come from its hub, which
  is newer.
- **Remote frames enter the hub as frames of a remote producer**: the I/O side holds one hub
  connection per remote owner of a stream and publishes through it, so the hub's authority,
  gap checks and fan-out apply unchanged (and a local producer of a remotely owned stream is
  refused by the hub itself). This core only sorts remote frames: stale ones are dropped,
  contiguous ones applied, and a gap (or a delta before any state) makes it buffer what
  follows and ask the owner for a snapshot; the snapshot is applied, then the buffered frames
  past it. A request that goes unanswered is repeated after ``retry_after``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from octosync.wire.cluster import ClusterFrame

ConnId = int


@dataclass(frozen=True, slots=True)
class Forward:
    """Publish the frame the local hub just accepted, under claim revision ``claim``."""

    stream: str
    claim: int


@dataclass(frozen=True, slots=True)
class Claim:
    """Compare-and-set the stream's entry to this node: create if ``last`` is 0, else update
    over revision ``last``; report with ``claim_result``."""

    stream: str
    last: int


@dataclass(frozen=True, slots=True)
class Release:
    """Delete the stream's entry if it is still at revision ``last``."""

    stream: str
    last: int


@dataclass(frozen=True, slots=True)
class PublishSnapshot:
    """Publish the local hub's current snapshot of the stream under claim ``claim``."""

    stream: str
    claim: int


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the frame the local hub just accepted until the claim is decided (``first``: it
    starts a new producer's held frames, which begin with its snapshot)."""

    stream: str
    first: bool


@dataclass(frozen=True, slots=True)
class PublishHeld:
    """The claim was won: publish the held frames, in order, under claim ``claim``."""

    stream: str
    claim: int


@dataclass(frozen=True, slots=True)
class Kick:
    """The local producer ``conn`` lost the stream to another node: refuse it."""

    stream: str
    conn: ConnId


@dataclass(frozen=True, slots=True)
class Apply:
    """Apply a remote owner's frame to the local hub as that owner's frame."""

    frame: ClusterFrame


@dataclass(frozen=True, slots=True)
class DropRemote:
    """The remote owner of the stream is gone: disconnect its producer from the local hub."""

    stream: str


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    """Ask ``owner`` for its current snapshot of the stream (answer: ``snapshot_reply``)."""

    stream: str
    owner: str


Effect = (
    Forward
    | Claim
    | Release
    | Hold
    | PublishHeld
    | PublishSnapshot
    | Kick
    | Apply
    | DropRemote
    | RequestSnapshot
)


@dataclass(frozen=True, slots=True)
class ClusterTiming:
    heartbeat_every: float = 0.5
    dead_after: float = 2.5
    retry_after: float = 1.0
    max_buffered: int = 4096
    """Frames held per stream while its snapshot is awaited; past that they are dropped and
    the snapshot asked for again."""
    max_held: int = 1024
    """A local producer's frames held while its node's claim is decided; past that, the
    other nodes start from the snapshot instead of every frame."""


@dataclass(slots=True)
class ClusterStats:
    published: int = 0
    received: int = 0
    applied: int = 0
    stale: int = 0
    fenced: int = 0
    gaps: int = 0
    snapshot_requests: int = 0
    claims_won: int = 0
    claims_lost: int = 0
    kicks: int = 0
    releases: int = 0
    takeovers: int = 0


@dataclass(slots=True)
class StreamView:
    """What this node knows of one stream."""

    owner: str | None = None
    claim: int = 0
    """Revision of the newest ownership entry seen (0: none)."""
    local_conn: ConnId | None = None
    mine: bool = False
    claiming: bool = False
    held: int = 0
    """Frames of the local producer held while the claim is decided."""
    kept_epoch: int | None = None
    """The epoch of the last snapshot this node, as owner, kept in JetStream."""
    applied_owner: str | None = None
    """The remote owner whose producer connection is in the local hub."""
    applied_claim: int = 0
    """The claim of the last remote frame applied here."""
    epoch: int | None = None
    """Epoch of the remote owner's frames applied to the local hub."""
    syncing: bool = False
    requested_at: float | None = None
    buffer: list[ClusterFrame] = field(default_factory=list)
    owner_epoch: int | None = None
    """The owner's epoch as its last frame or heartbeat said (lag = owner_epoch - epoch)."""
    behind_since: float | None = None
    """When a heartbeat first showed the owner ahead of what was applied here."""
    followed: bool = False
    """Local subscribers want the stream: its remote frames are applied here."""
    heard_claim: int = 0
    """The claim under which the owner's heartbeat last listed the stream."""
    released_claim: int = 0
    """The claim this node held when it last released the stream."""
    released_at: float = 0.0


class ClusterCore:
    def __init__(
        self, node: str, clock: Callable[[], float], timing: ClusterTiming | None = None
    ) -> None:
        self.node = node
        self.timing = timing or ClusterTiming()
        self.stats = ClusterStats()
        self.streams: dict[str, StreamView] = {}
        self._clock = clock
        self._started = clock()
        self.last_seen: dict[str, float] = {}

    # --- liveness ---------------------------------------------------------------------------

    def heartbeat(
        self,
        node: str,
        owned: Mapping[str, tuple[int, int]] | None = None,
        released: Mapping[str, int] | None = None,
    ) -> list[Effect]:
        """``node`` is alive; ``owned``: its streams' ``(claim, epoch)``.

        Heartbeats are a second source of ownership beside the KV watch, which does not
        survive every NATS restart: a newer claim listed is adopted, and a stream that the
        owner listed under its current claim (in a heartbeat, or by a frame applied here) and
        no longer lists was released: heartbeats and frames leave a node on one connection,
        in order, so this heartbeat is newer than those. A copy here that stays behind the
        listed epoch past ``retry_after`` asks for a snapshot (the frames that would have
        shown the gap were lost, and the producer may have gone quiet). ``released`` names
        the claims ``node`` gave up: a release of the claim known here is one, whatever the
        order in which the heartbeat and the ownership entries arrive.
        """
        if node == self.node:
            return []
        now = self._clock()
        self.last_seen[node] = now
        owned = owned or {}
        effects: list[Effect] = []
        for stream, claim in (released or {}).items():
            v = self.streams.get(stream)
            if v is not None and v.owner == node and v.claim == claim:
                v.owner = None
                effects += self._stop_following_remote(v, stream)
        for stream, view in self.streams.items():
            listed_before = view.heard_claim == view.claim or (
                view.applied_owner == node and view.applied_claim == view.claim
            )
            if (
                view.owner == node
                and listed_before
                and owned.get(stream, (None, 0))[0] != view.claim
            ):
                view.owner = None
                effects += self._stop_following_remote(view, stream)
        for stream, (claim, epoch) in owned.items():
            v = self.view(stream)
            if claim > v.claim:
                effects += self._adopt(v, stream, node, claim)
            if v.owner != node or v.claim != claim:
                continue
            v.heard_claim = claim
            v.owner_epoch = max(v.owner_epoch or 0, epoch)
            if v.epoch is not None and v.epoch < epoch and v.behind_since is None:
                v.behind_since = now
        return effects

    def alive(self, node: str) -> bool:
        if node == self.node:
            return True
        seen = self.last_seen.get(node, self._started)
        return self._clock() - seen < self.timing.dead_after

    def nodes_alive(self) -> list[str]:
        return sorted([self.node, *(n for n in self.last_seen if self.alive(n))])

    def view(self, stream: str) -> StreamView:
        v = self.streams.get(stream)
        if v is None:
            v = self.streams[stream] = StreamView()
        return v

    # --- the local producer -----------------------------------------------------------------

    def local_frame(self, stream: str, conn: ConnId) -> list[Effect]:
        """The local hub accepted a frame of producer ``conn``: forward it, claim, or hold."""
        v = self.view(stream)
        if v.local_conn != conn:
            v.local_conn, v.mine, v.claiming = conn, False, False
        if v.mine:
            self.stats.published += 1
            return [Forward(stream, v.claim)]
        if v.claiming:
            if v.held < self.timing.max_held:
                v.held += 1
                return [Hold(stream, first=False)]
            v.held = self.timing.max_held + 1  # too many: the snapshot will stand for them
            return []
        owner = v.owner
        if owner is not None and owner != self.node and self.alive(owner):
            # Another live node owns it (its frames have not reached this hub yet).
            return self._kick(v, stream)
        v.claiming, v.syncing, v.buffer, v.held = True, False, [], 1
        if owner is not None and owner != self.node:
            self.stats.takeovers += 1
        return [Claim(stream, 0 if owner is None else v.claim), Hold(stream, first=True)]

    def claim_result(self, stream: str, revision: int | None) -> list[Effect]:
        """The compare-and-set of ``Claim`` succeeded at ``revision``, or lost (None)."""
        v = self.view(stream)
        v.claiming = False
        if revision is None:
            self.stats.claims_lost += 1
            return self._kick(v, stream) if v.local_conn is not None else []
        self.stats.claims_won += 1
        effects = self._own(v, stream, revision)
        if v.local_conn is None:  # the producer left while the claim was on its way
            return effects + self._release(v, stream)
        v.mine = True
        held, v.held = v.held, 0
        if 0 < held <= self.timing.max_held:
            self.stats.published += held
            return [*effects, PublishHeld(stream, revision)]
        self.stats.published += 1
        return [*effects, PublishSnapshot(stream, revision)]

    def local_released(self, stream: str) -> list[Effect]:
        """The local producer of ``stream`` is no longer the hub's producer (it left)."""
        v = self.view(stream)
        v.local_conn = None
        if v.mine:
            v.mine = False
            return self._release(v, stream)
        return []

    def local_producers(self) -> dict[str, ConnId]:
        """Streams with a local producer that claimed or owns them (the hub's release hook
        calls ``local_released`` when one disconnects; a stopping node releases them all)."""
        return {s: v.local_conn for s, v in self.streams.items() if v.local_conn is not None}

    def _own(self, v: StreamView, stream: str, revision: int) -> list[Effect]:
        """This node owns the stream now. A remote owner this node followed while the claim
        was on its way (its producer had left) leaves the hub with it."""
        effects: list[Effect] = []
        if v.applied_owner is not None:
            effects.append(self._drop_remote(v, stream))
        v.owner, v.claim = self.node, max(v.claim, revision)
        v.applied_owner, v.epoch, v.syncing, v.buffer = None, None, False, []
        return effects

    def _release(self, v: StreamView, stream: str) -> list[Effect]:
        self.stats.releases += 1
        last = v.released_claim = v.claim
        v.released_at = self._clock()
        v.owner = None
        return [Release(stream, last)]

    def _kick(self, v: StreamView, stream: str) -> list[Effect]:
        conn = v.local_conn
        v.local_conn, v.mine, v.claiming, v.held = None, False, False, 0
        if conn is None:
            return []
        self.stats.kicks += 1
        return [Kick(stream, conn)]

    # --- ownership entries --------------------------------------------------------------------

    def ownership(self, stream: str, owner: str | None, revision: int) -> list[Effect]:
        """The KV watch saw the stream's entry set to ``owner`` (None: deleted) at
        ``revision``."""
        v = self.view(stream)
        if revision < v.claim or (revision == v.claim and owner == v.owner):
            return []
        return self._adopt(v, stream, owner, revision)

    def _adopt(self, v: StreamView, stream: str, owner: str | None, revision: int) -> list[Effect]:
        effects: list[Effect] = []
        if revision != v.claim:
            # A new claim is a new producer chain (even on the same node): what was applied
            # here does not continue it, so the next state comes from its snapshot.
            v.epoch, v.owner_epoch, v.behind_since, v.requested_at = None, None, None, None
            v.syncing, v.buffer = False, []
        v.claim, v.owner = revision, owner
        if v.mine and owner != self.node:
            effects += self._kick(v, stream)  # taken over while this node was presumed dead
        if v.applied_owner is not None and v.applied_owner != owner:
            effects.append(self._drop_remote(v, stream))
        return effects

    def _stop_following_remote(self, v: StreamView, stream: str) -> list[Effect]:
        """``DropRemote`` if a remote owner's frames are applied here or awaited, else none."""
        if v.applied_owner is None and not v.syncing:
            return []
        return [self._drop_remote(v, stream)]

    def _drop_remote(self, v: StreamView, stream: str) -> DropRemote:
        v.applied_owner, v.epoch, v.syncing, v.buffer = None, None, False, []
        v.requested_at = v.behind_since = None
        return DropRemote(stream)

    # --- interest -------------------------------------------------------------------------------

    def follow(self, stream: str) -> list[Effect]:
        """The stream has local subscribers now: take its frames, from a snapshot on."""
        v = self.view(stream)
        if v.followed:
            return []
        v.followed = True
        owner = v.owner
        if owner is None or owner == self.node or v.local_conn is not None or not self.alive(owner):
            return []  # a producer's first frames (a snapshot first) or the next claim will do
        v.syncing, v.buffer = True, []
        return self._request(v, stream, owner)

    def unfollow(self, stream: str) -> list[Effect]:
        """The last local subscriber left: stop applying the stream's frames here."""
        v = self.view(stream)
        v.followed = False
        effects = self._stop_following_remote(v, stream)
        if effects:
            v.owner_epoch = None
        return effects

    def following(self) -> list[str]:
        return sorted(s for s, v in self.streams.items() if v.followed)

    # --- remote frames ------------------------------------------------------------------------

    def remote_frame(self, frame: ClusterFrame) -> list[Effect]:
        """A frame from NATS: drop it, apply it, or buffer it and ask for a snapshot."""
        if frame.node == self.node:
            return []
        self.stats.received += 1
        v = self.view(frame.stream)
        if frame.claim < v.claim or (frame.claim == v.claim and frame.node != v.owner):
            self.stats.fenced += 1
            return []
        effects: list[Effect] = []
        if frame.claim > v.claim:
            effects += self._adopt(v, frame.stream, frame.node, frame.claim)
        v.owner_epoch = frame.to_epoch
        if v.local_conn is not None or not v.followed:
            return effects  # this node's producer holds the hub, or nobody here reads it
        return effects + self._sort(v, frame)

    def _sort(self, v: StreamView, frame: ClusterFrame) -> list[Effect]:
        if frame.kind == "snapshot":
            return self._apply_snapshot(v, frame)
        if v.syncing:
            if len(v.buffer) >= self.timing.max_buffered:
                v.buffer = []
                v.requested_at = None  # ask again on the next tick
            v.buffer.append(frame)
            return []
        if v.epoch is not None and frame.to_epoch <= v.epoch:
            self.stats.stale += 1
            return []
        if v.epoch is not None and frame.from_epoch == v.epoch:
            return self._apply(v, frame)
        if v.epoch is not None:
            self.stats.gaps += 1
        v.syncing, v.buffer = True, [frame]
        return self._request(v, frame.stream, frame.node)

    def _apply(self, v: StreamView, frame: ClusterFrame) -> list[Effect]:
        v.epoch, v.applied_owner, v.applied_claim = frame.to_epoch, frame.node, frame.claim
        if v.owner_epoch is None or v.epoch >= v.owner_epoch:
            v.behind_since = None
        self.stats.applied += 1
        return [Apply(frame)]

    def _apply_snapshot(self, v: StreamView, frame: ClusterFrame) -> list[Effect]:
        effects = self._apply(v, frame)
        held, v.buffer, v.syncing, v.requested_at = v.buffer, [], False, None
        for f in held:
            if f.claim == v.claim:
                effects += self._sort(v, f)
        return effects

    def _request(self, v: StreamView, stream: str, owner: str) -> list[Effect]:
        v.requested_at = self._clock()
        self.stats.snapshot_requests += 1
        return [RequestSnapshot(stream, owner)]

    def snapshot_reply(self, stream: str, frame: ClusterFrame | None) -> list[Effect]:
        """The owner's answer to ``RequestSnapshot`` (None: it had none to give)."""
        v = self.view(stream)
        if frame is None or frame.kind != "snapshot" or not v.syncing or not v.followed:
            return []
        if v.local_conn is not None:
            return []
        if frame.claim != v.claim or frame.node != v.owner:
            return []  # ownership moved on since the request; the next tick asks again
        v.owner_epoch = max(v.owner_epoch or 0, frame.to_epoch)
        return self._apply_snapshot(v, frame)

    def apply_failed(self, stream: str) -> None:
        """The local hub refused a remote frame: start over from a snapshot."""
        v = self.view(stream)
        v.epoch, v.syncing, v.buffer, v.requested_at = None, False, [], None

    # --- time -----------------------------------------------------------------------------------

    def tick(self) -> list[Effect]:
        """Presume silent owners dead, and (re)ask for snapshots that are due."""
        now = self._clock()
        effects: list[Effect] = []
        for stream, v in self.streams.items():
            owner = v.owner
            if owner is None or owner == self.node or v.local_conn is not None or not v.followed:
                continue
            if not self.alive(owner):
                effects += self._stop_following_remote(v, stream)
                continue
            due = v.requested_at is None or now - v.requested_at >= self.timing.retry_after
            behind = v.behind_since is not None and now - v.behind_since >= self.timing.retry_after
            if (v.epoch is None or v.syncing or behind) and due:
                if behind:
                    self.stats.gaps += 1
                    v.behind_since = None
                v.syncing = True
                effects += self._request(v, stream, owner)
        return effects

    # --- what this node serves as owner ---------------------------------------------------------

    def checkpoints_due(self, epochs: Mapping[str, int | None]) -> list[str]:
        """Owned streams whose snapshot should be kept in JetStream now: those whose epoch
        moved since the last one kept (``epochs``: the local hub's, per stream)."""
        due = []
        for stream, v in self.streams.items():
            epoch = epochs.get(stream)
            if v.mine and epoch is not None and epoch != v.kept_epoch:
                v.kept_epoch = epoch
                due.append(stream)
        return due

    def produced_elsewhere(self, stream: str) -> str | None:
        """The live node that owns ``stream``, if not this one: a producer here is refused
        before its first frame is accepted (the claim's compare-and-set stays the arbiter
        when the ownership entry has not arrived yet)."""
        v = self.streams.get(stream)
        if v is None or v.owner is None or v.owner == self.node or not self.alive(v.owner):
            return None
        return v.owner

    def stale_reason(self, stream: str, linked: bool) -> str | None:
        """Why this node must not serve ``stream``'s state to a new subscriber now, or None.

        A copy that comes from another node (its owner's frames, or the snapshot kept in
        JetStream) is only as fresh as the link to the cluster: while NATS is out of reach
        the owner may have moved on, so a late joiner is refused (``Unavailable``) rather than
        handed old state as if it were current. Streams this node produces stay served."""
        if linked:
            return None
        v = self.streams.get(stream)
        if v is None or v.mine:
            return None
        return (
            f"node {self.node!r} cannot reach the cluster, so its copy of stream {stream!r} "
            "may be stale; try again later or on another node"
        )

    def write_target(self, stream: str) -> tuple[str, int] | None:
        """Where a local subscriber's write to ``stream`` goes: its live remote owner and the
        claim (None: nowhere; the write is dropped, as one to a stream without a producer)."""
        owner = self.produced_elsewhere(stream)
        return None if owner is None else (owner, self.streams[stream].claim)

    def released_claims(self) -> dict[str, int]:
        """Streams this node released lately and nobody has claimed since (as far as it
        knows), for its heartbeats. Past ``4 * dead_after`` a node that has not heard of the
        release presumes this one dead, which frees the stream there anyway."""
        since = self._clock() - 4 * self.timing.dead_after
        return {
            s: v.released_claim
            for s, v in self.streams.items()
            if v.released_claim
            and v.released_at >= since
            and not v.mine
            and v.owner in (None, self.node)
        }

    def owns(self, stream: str) -> int | None:
        """The claim revision if this node owns ``stream`` and its producer is here."""
        v = self.streams.get(stream)
        return v.claim if v is not None and v.mine else None

    def lag(self, stream: str) -> int | None:
        """Epochs this node's copy is behind the owner's last known epoch (0 when it owns)."""
        v = self.streams.get(stream)
        if v is None:
            return None
        if v.mine:
            return 0
        if v.owner_epoch is None or v.epoch is None:
            return None
        return max(0, v.owner_epoch - v.epoch)
