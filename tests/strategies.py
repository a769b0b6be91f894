"""Hypothesis strategies for state-plane messages, shared by the wire, ipc and hub tests.

Every strategy produces values that satisfy the message invariants (payload present exactly
when resolved, ``epoch == base_epoch + 1``, ids within 2**53), so anything they generate must
round-trip through every dialect. ``tagged=True`` restricts to what the lazily-spec tagged
dialect can express: its ResyncRequest carries only ``from_epoch``, and a NodeAdd decodes to one
spelling of its state.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from octosync.ipc.messages import (
    MAX_SAFE_ID,
    BlobRef,
    CellSet,
    CrdtOp,
    CrdtSync,
    Delta,
    DeltaOp,
    Edge,
    EdgeAdd,
    EdgeRemove,
    Handshake,
    Invalidate,
    IpcMessage,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    NodeState,
    OutboxAck,
    Payload,
    ResyncRequest,
    SlotValue,
    Snapshot,
    WireStamp,
)

U64_MAX = 2**64 - 1

node_ids = st.one_of(st.integers(0, 64), st.integers(0, MAX_SAFE_ID))
"""Mostly small ids (so ops collide on nodes), sometimes anywhere up to 2**53."""
epochs = st.integers(0, MAX_SAFE_ID)
base_epochs = st.integers(0, MAX_SAFE_ID - 1)
type_tags = st.one_of(
    st.sampled_from(["i32", "i64", "f64", "bool", "string", "bytes", "json"]),
    st.text(min_size=1, max_size=12),
)
payload_bytes = st.binary(max_size=48)
blob_refs = st.builds(
    BlobRef,
    offset=st.integers(0, U64_MAX),
    len=st.integers(0, U64_MAX),
    generation=st.integers(0, U64_MAX),
    epoch=st.integers(0, U64_MAX),
    checksum=st.integers(0, U64_MAX),
    backend=st.sampled_from(["shm", "arrow", "in_process"]),
)
payloads: st.SearchStrategy[Payload] = st.one_of(payload_bytes, payload_bytes, blob_refs)
node_keys = st.from_regex(r"\A[a-z0-9_.-]{1,8}(/[a-z0-9_.-]{1,8}){0,3}\Z")
optional_keys = st.one_of(st.none(), node_keys)
unresolved_states: st.SearchStrategy[NodeState] = st.sampled_from(["dirty", "unset", "opaque"])
state_hashes = st.one_of(st.none(), st.binary(min_size=32, max_size=32))


@st.composite
def node_snapshots(draw: Any, ids: st.SearchStrategy[int] = node_ids) -> NodeSnapshot:
    sid = draw(ids)
    tag = draw(type_tags)
    key = draw(optional_keys)
    if draw(st.booleans()):
        return NodeSnapshot(sid, tag, "resolved", draw(payloads), key)
    return NodeSnapshot(sid, tag, draw(unresolved_states), None, key)


edges = st.builds(Edge, node_ids, node_ids)


@st.composite
def node_adds(draw: Any, ids: st.SearchStrategy[int] = node_ids, tagged: bool = False) -> NodeAdd:
    """``tagged``: the one spelling the tagged dialect decodes to (state only when not implied
    by the payload); otherwise both the implied and the spelled-out forms."""
    sid = draw(ids)
    tag = draw(type_tags)
    key = draw(optional_keys)
    if draw(st.booleans()):
        state: NodeState | None = draw(st.sampled_from([None] if tagged else [None, "resolved"]))
        return NodeAdd(sid, tag, draw(payloads), key, state)
    unresolved: list[NodeState | None] = ["dirty", "opaque", None]
    state = draw(st.sampled_from(unresolved if tagged else [*unresolved, "unset"]))
    return NodeAdd(sid, tag, None, key, state)


def delta_ops(
    ids: st.SearchStrategy[int] = node_ids, tagged: bool = False
) -> st.SearchStrategy[DeltaOp]:
    return st.one_of(
        st.builds(CellSet, ids, payloads),
        st.builds(SlotValue, ids, payloads),
        st.builds(Invalidate, ids),
        node_adds(ids, tagged),
        st.builds(NodeRemove, ids),
        st.builds(EdgeAdd, ids, ids),
        st.builds(EdgeRemove, ids, ids),
    )


@st.composite
def snapshots(draw: Any, max_nodes: int = 8) -> Snapshot:
    return Snapshot(
        epoch=draw(epochs),
        nodes=tuple(draw(st.lists(node_snapshots(), max_size=max_nodes))),
        edges=tuple(draw(st.lists(edges, max_size=max_nodes))),
        roots=tuple(draw(st.lists(node_ids, max_size=max_nodes))),
        state_hash=draw(state_hashes),
    )


@st.composite
def deltas(draw: Any, max_ops: int = 10, tagged: bool = False) -> Delta:
    base = draw(base_epochs)
    ops = tuple(draw(st.lists(delta_ops(tagged=tagged), max_size=max_ops)))
    return Delta(base_epoch=base, epoch=base + 1, ops=ops, state_hash=draw(state_hashes))


def resync_requests(tagged: bool = False) -> st.SearchStrategy[ResyncRequest]:
    if tagged:
        return st.builds(ResyncRequest, last_epoch=epochs, reason=st.none())
    return st.builds(
        ResyncRequest,
        last_epoch=st.one_of(st.none(), epochs),
        reason=st.one_of(st.none(), st.text(max_size=20)),
    )


outbox_acks = st.builds(OutboxAck, epochs)
wire_stamps = st.builds(
    WireStamp, st.integers(0, U64_MAX), st.integers(0, U64_MAX), st.integers(0, MAX_SAFE_ID)
)
crdt_ops = st.builds(CrdtOp, node_ids, wire_stamps, payloads, optional_keys)
crdt_syncs = st.builds(
    CrdtSync,
    st.one_of(st.none(), st.lists(st.tuples(node_ids, wire_stamps), max_size=3).map(tuple)),
    st.lists(crdt_ops, max_size=4).map(tuple),
)


def ipc_messages(tagged: bool = False) -> st.SearchStrategy[IpcMessage]:
    return st.one_of(
        snapshots(), deltas(tagged=tagged), resync_requests(tagged), outbox_acks, crdt_syncs
    )


feature_names = st.sampled_from(["shared-blob", "signaling-relay", "publish", "state-hash"])

handshakes = st.builds(
    Handshake,
    protocol_id=st.one_of(st.just("lazily-ipc"), st.text(max_size=12)),
    protocol_major_version=st.integers(0, 2**32 - 1),
    codec=st.sampled_from(["json", "msgpack", "json_tagged"]),
    max_frame_size=st.integers(0, 2**32 - 1),
    fragmentation_supported=st.booleans(),
    ordered_reliable=st.booleans(),
    peer_id=st.integers(0, MAX_SAFE_ID),
    session_id=st.text(max_size=16),
    features=st.lists(feature_names, unique=True, max_size=4).map(tuple),
    required_features=st.lists(feature_names, unique=True, max_size=2).map(tuple),
)
