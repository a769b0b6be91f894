"""The lazily-spec externally tagged form, shared by its JSON and MsgPack codecs.

Wire shape (lazily-spec ``schemas/``): ``{"Snapshot": {...}}``, ``{"Delta": {...}}``,
``{"ResyncRequest": {"from_epoch"}}``, ``{"OutboxAck": {"through_epoch"}}``,
``{"CrdtSync": {...}}``, ``{"RemoteOp": {"kind", "node", ...}}``,
``{"RemoteOpResult": {"request", ...}}``; nodes are named ``node``; value bytes are arrays of u8
(``{"Payload": [...]}`` in node states, ``{"Inline": [...]}`` in ops) or ``{"SharedBlob": {...}}``;
the unit state ``"Opaque"`` is a bare string; a node's optional ``key`` is omitted when absent
and read as absent when null; a ``CrdtOp`` always carries ``key``.

octosync extensions, each omitted or unused by a spec-only producer: unit states ``"Dirty"`` and
``"Unset"`` (the spec has no way to say either; mapping them to ``Opaque`` would lose them), and
an optional ``state_hash`` (u8 array) on Snapshot and Delta. Multi-epoch-span deltas
(``epoch > base_epoch + 1``) decode like any delta. Not supported (a ``DecodeError``): the
QueueCell ops.

Every enum is a Struct whose fields are its variants (absent = ``UNSET``; an explicit null is a
type error); decoding checks exactly one is present,
so the path of a failure is the wire path (``$.Delta.ops[2].CellSet.node``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from octosync.errors import DecodeError, LocalProtocolError
from octosync.ipc.messages import (
    BlobRef,
    CellSet,
    CrdtOp,
    CrdtSync,
    Delta,
    DeltaOp,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Epoch,
    Invalidate,
    IpcMessage,
    NodeAdd,
    NodeId,
    NodeKey,
    NodeRemove,
    NodeSnapshot,
    NodeState,
    OpKind,
    OutboxAck,
    Payload,
    PeerId,
    RemoteOp,
    RemoteOpResult,
    ResyncRequest,
    SlotValue,
    Snapshot,
    WireStamp,
)

B = TypeVar("B")
"""How byte strings appear on the wire: u8 arrays in JSON; u8 arrays or bin in MsgPack."""


class _W(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """Transient decode/encode shapes; frozen and made of scalars, so they cannot form cycles
    and need no cyclic-GC tracking (a quarter of decode time on big deltas)."""


UnitState = Literal["Opaque", "Dirty", "Unset"]


class WState(_W, Generic[B], frozen=True):
    Payload: B | UnsetType = UNSET
    SharedBlob: BlobRef | UnsetType = UNSET


class WValue(_W, Generic[B], frozen=True):
    Inline: B | UnsetType = UNSET
    SharedBlob: BlobRef | UnsetType = UNSET


class WNode(_W, Generic[B], frozen=True):
    node: NodeId
    type_tag: str
    state: UnitState | WState[B]
    key: NodeKey | None = None


class WSnapshot(_W, Generic[B], frozen=True):
    epoch: Epoch
    nodes: tuple[WNode[B], ...]
    edges: tuple[Edge, ...]
    roots: tuple[NodeId, ...]
    state_hash: B | None = None


class WNodeRef(_W, frozen=True):
    node: NodeId


class WValueOp(_W, Generic[B], frozen=True):
    node: NodeId
    payload: WValue[B]


class WOp(_W, Generic[B], frozen=True):
    CellSet: WValueOp[B] | UnsetType = UNSET
    SlotValue: WValueOp[B] | UnsetType = UNSET
    Invalidate: WNodeRef | UnsetType = UNSET
    NodeAdd: WNode[B] | UnsetType = UNSET
    NodeRemove: WNodeRef | UnsetType = UNSET
    EdgeAdd: Edge | UnsetType = UNSET
    EdgeRemove: Edge | UnsetType = UNSET


class WDelta(_W, Generic[B], frozen=True):
    base_epoch: Epoch
    epoch: Epoch
    ops: tuple[WOp[B], ...]
    state_hash: B | None = None


class WResync(_W, frozen=True):
    from_epoch: Epoch


class WAck(_W, frozen=True):
    through_epoch: Epoch


class WCrdtOp(
    msgspec.Struct,
    Generic[B],
    frozen=True,
    forbid_unknown_fields=True,
    omit_defaults=False,
    gc=False,
):
    """Written with ``key`` always present (null when unset), as the spec requires."""

    node: NodeId
    stamp: WireStamp
    state: WValue[B]
    key: NodeKey | None = None


class WCrdtSync(_W, Generic[B], frozen=True):
    ops: tuple[WCrdtOp[B], ...]
    frontier: tuple[tuple[PeerId, WireStamp], ...] | None = None


class WRemoteOp(_W, Generic[B], frozen=True):
    kind: OpKind
    node: NodeId
    payload: B | None = None
    request: int = 0
    peer: PeerId | None = None
    subject: str | None = None


class WRemoteOpResult(_W, frozen=True):
    request: int
    peer: PeerId | None = None
    error: str | None = None
    message: str | None = None
    applied: bool = True


class WEnvelope(_W, Generic[B], frozen=True):
    Snapshot: WSnapshot[B] | UnsetType = UNSET
    Delta: WDelta[B] | UnsetType = UNSET
    ResyncRequest: WResync | UnsetType = UNSET
    OutboxAck: WAck | UnsetType = UNSET
    CrdtSync: WCrdtSync[B] | UnsetType = UNSET
    RemoteOp: WRemoteOp[B] | UnsetType = UNSET
    RemoteOpResult: WRemoteOpResult | UnsetType = UNSET


ENVELOPE_TAGS: tuple[str, ...] = WEnvelope.__struct_fields__
"""One key per message of ``ipc.messages.IpcMessage``, named as its class (held equal to the
union by ``tests/wire/test_tagged.py``); ``json_tagged`` sniffs frames by them."""
_ENVELOPE_FIELDS = ENVELOPE_TAGS

# --- wire -> messages ------------------------------------------------------------------------


def _lazy_path(template: str, index: int) -> Callable[[], str]:
    """Error paths are only formatted when there is an error."""
    return lambda: template.format(index)


def _variant_error(obj: msgspec.Struct, path: str, dialect: str) -> DecodeError:
    fields = obj.__struct_fields__
    found = ", ".join(f for f in fields if getattr(obj, f) is not UNSET) or "none"
    return DecodeError(
        f"{dialect}: expected exactly one of {', '.join(fields)}; found {found}", path=path
    )


def _variant(obj: msgspec.Struct) -> tuple[int, Any]:
    """``(index, body)`` of the one variant present in an externally tagged enum, else (-1, _)."""
    values = msgspec.structs.astuple(obj)
    if values.count(UNSET) == len(values) - 1:
        for index, value in enumerate(values):
            if value is not UNSET:
                return index, value
    return -1, None


def _two_way(first: Any, blob: Any) -> Payload | None:
    """The payload of a {bytes-variant | SharedBlob} enum; None unless exactly one is present."""
    if blob is UNSET:
        return None if first is UNSET else bytes(first)
    return blob if first is UNSET else None


_UNIT_TO_STATE: dict[str, NodeState] = {"Opaque": "opaque", "Dirty": "dirty", "Unset": "unset"}
_STATE_TO_UNIT: dict[str, UnitState] = {v: k for k, v in _UNIT_TO_STATE.items()}  # type: ignore[misc]


def _state(state: Any, path: Callable[[], str], dialect: str) -> tuple[NodeState, Payload | None]:
    if isinstance(state, str):
        return _UNIT_TO_STATE[state], None
    payload = _two_way(state.Payload, state.SharedBlob)
    if payload is None:
        raise _variant_error(state, path(), dialect)
    return "resolved", payload


def _value(value: WValue[Any], path: Callable[[], str], dialect: str) -> Payload:
    payload = _two_way(value.Inline, value.SharedBlob)
    if payload is None:
        raise _variant_error(value, path(), dialect)
    return payload


def _op(op: WOp[Any], index: int, dialect: str) -> DeltaOp:
    kind, body = _variant(op)
    if kind == 0:
        payload = _value(
            body.payload, _lazy_path("$.Delta.ops[{}].CellSet.payload", index), dialect
        )
        return CellSet(body.node, payload)
    if kind == 1:
        payload = _value(
            body.payload, _lazy_path("$.Delta.ops[{}].SlotValue.payload", index), dialect
        )
        return SlotValue(body.node, payload)
    if kind == 2:
        return Invalidate(body.node)
    if kind == 3:
        state, node_payload = _state(
            body.state, _lazy_path("$.Delta.ops[{}].NodeAdd.state", index), dialect
        )
        # Resolved and unset are implied by the payload (the seed's form); others are spelled.
        explicit = None if state in ("resolved", "unset") else state
        return NodeAdd(body.node, body.type_tag, node_payload, body.key, explicit)
    if kind == 4:
        return NodeRemove(body.node)
    if kind == 5:
        return EdgeAdd(body.dependent, body.dependency)
    if kind == 6:
        return EdgeRemove(body.dependent, body.dependency)
    raise _variant_error(op, f"$.Delta.ops[{index}]", dialect)


def _hash(raw: Any) -> bytes | None:
    return None if raw is None else bytes(raw)


def from_wire(env: WEnvelope[Any], dialect: str) -> IpcMessage:
    """The message an envelope carries; ``DecodeError`` naming the wire path if it is invalid."""
    index, body = _variant(env)
    if index < 0:
        raise _variant_error(env, "$", dialect)
    kind = _ENVELOPE_FIELDS[index]
    if kind == "Delta":
        if body.epoch <= body.base_epoch:
            raise DecodeError(
                f"{dialect}: epoch {body.epoch} must be above base_epoch {body.base_epoch}",
                path="$.Delta.epoch",
            )
        ops = tuple([_op(op, i, dialect) for i, op in enumerate(body.ops)])
        return Delta(body.base_epoch, body.epoch, ops, _hash(body.state_hash))
    if kind == "Snapshot":
        nodes = []
        for i, n in enumerate(body.nodes):
            state, payload = _state(n.state, _lazy_path("$.Snapshot.nodes[{}].state", i), dialect)
            nodes.append(NodeSnapshot(n.node, n.type_tag, state, payload, n.key))
        return Snapshot(body.epoch, tuple(nodes), body.edges, body.roots, _hash(body.state_hash))
    if kind == "ResyncRequest":
        return ResyncRequest(last_epoch=body.from_epoch)
    if kind == "OutboxAck":
        return OutboxAck(body.through_epoch)
    if kind in ("RemoteOp", "RemoteOpResult"):
        # The message's own checks (bounds, a payload exactly for writes) apply here too.
        fields = msgspec.structs.asdict(body)
        if kind == "RemoteOp" and body.payload is not None:
            fields["payload"] = bytes(body.payload)
        try:
            if kind == "RemoteOp":
                return msgspec.convert(fields, RemoteOp)
            return msgspec.convert(fields, RemoteOpResult)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"{dialect}: {exc}", path=f"$.{kind}") from exc
    ops_ = tuple(
        CrdtOp(
            o.node,
            o.stamp,
            _value(o.state, _lazy_path("$.CrdtSync.ops[{}].state", i), dialect),
            o.key,
        )
        for i, o in enumerate(body.ops)
    )
    return CrdtSync(body.frontier, ops_)


# --- messages -> wire ------------------------------------------------------------------------


def _wire_state(state: NodeState, payload: Payload | None) -> UnitState | WState[list[int]]:
    if payload is None:
        if state == "resolved":
            raise LocalProtocolError("a resolved node needs a payload")
        return _STATE_TO_UNIT[state]
    if isinstance(payload, BlobRef):
        return WState(SharedBlob=payload)
    return WState(Payload=list(payload))


def _wire_value(payload: Payload) -> WValue[list[int]]:
    if isinstance(payload, BlobRef):
        return WValue(SharedBlob=payload)
    return WValue(Inline=list(payload))


def _wire_op(op: DeltaOp) -> WOp[list[int]]:
    if isinstance(op, CellSet):
        return WOp(CellSet=WValueOp(op.slot_id, _wire_value(op.payload)))
    if isinstance(op, SlotValue):
        return WOp(SlotValue=WValueOp(op.slot_id, _wire_value(op.payload)))
    if isinstance(op, Invalidate):
        return WOp(Invalidate=WNodeRef(op.slot_id))
    if isinstance(op, NodeAdd):
        state = _wire_state(op.effective_state, op.payload)
        return WOp(NodeAdd=WNode(op.slot_id, op.type_tag, state, op.key))
    if isinstance(op, NodeRemove):
        return WOp(NodeRemove=WNodeRef(op.slot_id))
    if isinstance(op, EdgeAdd):
        return WOp(EdgeAdd=Edge(op.dependent, op.dependency))
    return WOp(EdgeRemove=Edge(op.dependent, op.dependency))


def _wire_hash(h: bytes | None) -> list[int] | None:
    return None if h is None else list(h)


def to_wire(message: IpcMessage) -> WEnvelope[list[int]]:
    """The envelope for a message. A ResyncRequest's ``reason`` has no place here and is dropped;
    a missing ``last_epoch`` goes out as ``from_epoch`` 0."""
    if isinstance(message, Delta):
        ops = [_wire_op(op) for op in message.ops]
        return WEnvelope(
            Delta=WDelta(
                message.base_epoch, message.epoch, tuple(ops), _wire_hash(message.state_hash)
            )
        )
    if isinstance(message, Snapshot):
        nodes = tuple(
            WNode(n.slot_id, n.type_tag, _wire_state(n.state, n.payload), n.key)
            for n in message.nodes
        )
        return WEnvelope(
            Snapshot=WSnapshot(
                message.epoch, nodes, message.edges, message.roots, _wire_hash(message.state_hash)
            )
        )
    if isinstance(message, ResyncRequest):
        return WEnvelope(ResyncRequest=WResync(message.last_epoch or 0))
    if isinstance(message, OutboxAck):
        return WEnvelope(OutboxAck=WAck(message.through_epoch))
    if isinstance(message, RemoteOp):
        payload = None if message.payload is None else list(message.payload)
        return WEnvelope(
            RemoteOp=WRemoteOp(
                message.kind,
                message.node,
                payload,
                message.request,
                message.peer,
                message.subject,
            )
        )
    if isinstance(message, RemoteOpResult):
        return WEnvelope(
            RemoteOpResult=WRemoteOpResult(
                message.request, message.peer, message.error, message.message, message.applied
            )
        )
    ops_ = tuple(WCrdtOp(o.slot_id, o.stamp, _wire_value(o.state), o.key) for o in message.ops)
    return WEnvelope(CrdtSync=WCrdtSync(ops_, message.frontier))
