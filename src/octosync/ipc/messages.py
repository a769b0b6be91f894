"""State-plane messages: the one in-memory form every wire dialect converts to and from.

Field names follow the seed's JSON dialect (``type``/``op`` tags, ``slot_id``), so the seed
dialect encodes these Structs directly with no conversion; other dialects translate.

Identifiers and epochs are bounded to 2**53 in every dialect, not only JSON: the hub re-encodes
a stream for subscribers of any dialect, so a value a JavaScript peer cannot hold exactly must be
refused where it enters, whatever codec carried it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from octosync.bounds import MAX_SAFE_INTEGER, NODE_KEY_MAX, NODE_KEY_PATTERN

MAX_SAFE_ID = MAX_SAFE_INTEGER
"""Largest identifier or epoch accepted anywhere (JavaScript's exact-integer bound)."""

U53 = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_ID)]
U64 = Annotated[int, msgspec.Meta(ge=0)]
"""msgspec itself refuses integers beyond the u64 range."""
U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
NodeId = U53
PeerId = U53
Epoch = U53
NodeKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=NODE_KEY_MAX, pattern=NODE_KEY_PATTERN)
]
"""Optional keyed address of a node: a '/'-joined path such as ``scores/alice``."""

NodeState = Literal["resolved", "dirty", "unset", "opaque"]
"""``opaque``: visible to the peer but not serialisable (the tagged dialect's ``Opaque``)."""


class _Frozen(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base for all state-plane structs: immutable, strict, absent-when-default on the wire."""


BlobBackend = Literal["shm", "arrow", "in_process"]


class BlobRef(_Frozen, frozen=True):
    """A payload that lives in a blob backend (shared memory, Arrow, in-process arena).

    ``backend`` omitted or an explicit null both read as ``shm`` (lazily-spec § Zero-copy
    transport: null is the absent form); it is omitted again on the way out. A token outside
    the enum is refused, never normalised.
    """

    offset: U64
    len: U64
    generation: U64
    epoch: U64
    checksum: U64
    backend: BlobBackend | None = "shm"

    def __post_init__(self) -> None:
        if self.backend is None:
            msgspec.structs.force_setattr(self, "backend", "shm")


Payload = bytes | BlobRef
"""Value bytes as produced by a type tag's encoder, or a reference to them."""


class NodeSnapshot(_Frozen, frozen=True):
    slot_id: NodeId
    type_tag: str
    state: NodeState
    payload: Payload | None = None
    key: NodeKey | None = None

    def __post_init__(self) -> None:
        if (self.state == "resolved") != (self.payload is not None):
            raise ValueError(
                f"node {self.slot_id}: payload must be present exactly when state is 'resolved'"
            )


class Edge(_Frozen, frozen=True):
    """``dependent`` reads ``dependency``."""

    dependent: NodeId
    dependency: NodeId


# --- delta ops -------------------------------------------------------------------------------


class _Op(_Frozen, frozen=True, tag_field="op"):
    pass


class CellSet(_Op, frozen=True, tag="cell_set"):
    """A cell was written with a value different from its previous one."""

    slot_id: NodeId
    payload: Payload


class SlotValue(_Op, frozen=True, tag="slot_value"):
    """A derived node recomputed to a new value."""

    slot_id: NodeId
    payload: Payload


class Invalidate(_Op, frozen=True, tag="invalidate"):
    """A derived node is dirty and was not recomputed (mirror-lazy mode)."""

    slot_id: NodeId


class NodeAdd(_Op, frozen=True, tag="node_add"):
    """A node appeared. ``state`` absent means: resolved if a payload is given, else unset."""

    slot_id: NodeId
    type_tag: str
    payload: Payload | None = None
    key: NodeKey | None = None
    state: NodeState | None = None

    @property
    def effective_state(self) -> NodeState:
        if self.state is not None:
            return self.state
        return "resolved" if self.payload is not None else "unset"


class NodeRemove(_Op, frozen=True, tag="node_remove"):
    slot_id: NodeId


class EdgeAdd(_Op, frozen=True, tag="edge_add"):
    dependent: NodeId
    dependency: NodeId


class EdgeRemove(_Op, frozen=True, tag="edge_remove"):
    dependent: NodeId
    dependency: NodeId


DeltaOp = CellSet | SlotValue | Invalidate | NodeAdd | NodeRemove | EdgeAdd | EdgeRemove

# --- messages --------------------------------------------------------------------------------


class _Msg(_Frozen, frozen=True, tag_field="type"):
    pass


class Snapshot(_Msg, frozen=True, tag="snapshot"):
    """Full state visible to one peer at ``epoch``."""

    epoch: Epoch
    nodes: tuple[NodeSnapshot, ...] = ()
    edges: tuple[Edge, ...] = ()
    roots: tuple[NodeId, ...] = ()
    state_hash: bytes | None = None


class Delta(_Msg, frozen=True, tag="delta"):
    """The change set of one or more flushes: from ``base_epoch`` to ``epoch > base_epoch``.

    Octosync's publishers send one flush per delta (``epoch == base_epoch + 1``); lazily-spec
    producers may fold several accepted events into one (a multi-epoch span, ``epoch -
    base_epoch`` of them), which applies exactly like that many unit deltas carrying the same
    ops in order. Receivers accept it only at ``base_epoch == last_epoch`` (the gap rule) and
    advance to ``epoch`` at once."""

    base_epoch: Epoch
    epoch: Epoch
    ops: tuple[DeltaOp, ...] = ()
    state_hash: bytes | None = None

    def __post_init__(self) -> None:
        if self.epoch <= self.base_epoch:
            raise ValueError(f"epoch {self.epoch} must be above base_epoch {self.base_epoch}")

    @property
    def span(self) -> int:
        """How many epochs the delta advances (1 for a single flush)."""
        return self.epoch - self.base_epoch


class ResyncRequest(_Msg, frozen=True, tag="resync_request"):
    """Receiver lost sync (gap, desync) and asks for a fresh Snapshot."""

    last_epoch: Epoch | None = None
    reason: str | None = None


class OutboxAck(_Msg, frozen=True, tag="outbox_ack"):
    """Receiver has applied everything through ``through_epoch``; the sender may prune its
    outbox up to there, and replays what follows on reconnect (lazily-spec reliable sync)."""

    through_epoch: Epoch


class WireStamp(_Frozen, frozen=True):
    """HLC stamp of a CRDT op: total order by (wall_time, logical, peer)."""

    wall_time: U64
    logical: U64
    peer: PeerId


class CrdtOp(_Frozen, frozen=True):
    """One replicated cell write in anti-entropy sync; ``key`` is part of its merge identity."""

    slot_id: NodeId
    stamp: WireStamp
    state: Payload
    key: NodeKey | None = None


class CrdtSync(_Msg, frozen=True, tag="crdt_sync"):
    """Anti-entropy frame (lazily-spec distributed plane): per-peer frontier and an op batch.

    ``frontier`` None means omitted: unchanged since the last accepted frame.
    """

    frontier: tuple[tuple[PeerId, WireStamp], ...] | None = None
    ops: tuple[CrdtOp, ...] = ()


OpKind = Literal["write", "trigger_effect"]
"""What a writer may ask of a producer (lazily-spec ``OpKind`` without ``read``: reading is
subscribing, never a request)."""
Subject = Annotated[str, msgspec.Meta(max_length=256)]
ErrorText = Annotated[str, msgspec.Meta(max_length=1024)]


class RemoteOp(_Msg, frozen=True, tag="remote_op"):
    """A writer's request to a stream's producer (lazily-spec ``RemoteOp {kind, node}``): set
    cell ``node`` to ``payload``, or run effect ``node``.

    ``request`` correlates the answer (0: answer a refusal only). ``peer`` and ``subject`` say
    who asked: the server sets them from the writer's connection and token before forwarding,
    and refuses a writer that sends them, so a producer can trust them.
    """

    kind: OpKind
    node: NodeId
    payload: bytes | None = None
    request: U53 = 0
    peer: PeerId | None = None
    subject: Subject | None = None

    def __post_init__(self) -> None:
        if (self.kind == "write") != (self.payload is not None):
            raise ValueError("a write carries a payload, a trigger_effect none")


class RemoteOpResult(_Msg, frozen=True, tag="remote_op_result"):
    """The producer's answer to a ``RemoteOp``: applied (``error`` None) or refused with a
    typed error name. ``peer`` routes it back through the server (which strips it);
    ``applied`` False: delivered to a producer that does not confirm (it took the older
    ``cell_set`` form), so only delivery is known."""

    request: U53
    peer: PeerId | None = None
    error: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    message: ErrorText | None = None
    applied: bool = True


IpcMessage = Snapshot | Delta | ResyncRequest | OutboxAck | CrdtSync | RemoteOp | RemoteOpResult


class Handshake(_Frozen, frozen=True):
    """Capability negotiation; the first frame each side sends, before any IpcMessage."""

    protocol_id: str
    protocol_major_version: U32
    codec: str
    max_frame_size: U32
    fragmentation_supported: bool
    ordered_reliable: bool
    peer_id: PeerId
    session_id: str
    features: tuple[str, ...] = ()
    required_features: tuple[str, ...] = ()
