"""Rewrite a state-plane message's payloads between bytes and shared-blob descriptors.

``inline_blobs`` replaces every ``BlobRef`` with the bytes it names, read and checked through
``read`` (a region's checked copy), so what the server journals and relays never points into
memory that may be reused. ``spill_blobs`` does the opposite for peers that negotiated
``shared-blob``: payloads of ``threshold`` bytes or more are written through ``write`` and
replaced by their descriptors. Both drop ``state_hash`` when they change anything: the
lazily state hash covers a blob by its descriptor, so a hash over one form does not hold for
the other (the receiver's mirror checks what it can, the gap rule still holds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

from octosync.ipc.messages import (
    BlobRef,
    CellSet,
    Delta,
    DeltaOp,
    NodeAdd,
    NodeSnapshot,
    Payload,
    SlotValue,
    Snapshot,
)

Reader = Callable[[BlobRef], bytes]
Writer = Callable[[bytes], BlobRef | None]
"""Stores a payload and names it; None: it stays inline (too large for the arena)."""


def has_blobs(msg: Snapshot | Delta) -> bool:
    if isinstance(msg, Snapshot):
        return any(isinstance(n.payload, BlobRef) for n in msg.nodes)
    return any(isinstance(getattr(op, "payload", None), BlobRef) for op in msg.ops)


def _map_payloads(msg: Snapshot | Delta, fn: Callable[[Payload], Payload]) -> Snapshot | Delta:
    changed = False

    def swap(p: Payload | None) -> Payload | None:
        nonlocal changed
        if p is None:
            return None
        out = fn(p)
        changed = changed or out is not p
        return out

    if isinstance(msg, Snapshot):
        nodes = tuple(
            n if n.payload is None else _with_payload(n, swap(n.payload)) for n in msg.nodes
        )
        if not changed:
            return msg
        return msgspec.structs.replace(msg, nodes=nodes, state_hash=None)
    ops: list[DeltaOp] = []
    for op in msg.ops:
        if isinstance(op, CellSet | SlotValue | NodeAdd) and op.payload is not None:
            op = _with_payload(op, swap(op.payload))
        ops.append(op)
    if not changed:
        return msg
    return msgspec.structs.replace(msg, ops=tuple(ops), state_hash=None)


_Carrier = TypeVar("_Carrier", bound=NodeSnapshot | CellSet | SlotValue | NodeAdd)


def _with_payload(item: _Carrier, p: Payload | None) -> _Carrier:
    return item if p is item.payload else msgspec.structs.replace(item, payload=p)


def inline_blobs(msg: Snapshot | Delta, read: Reader) -> Snapshot | Delta:
    """``msg`` with every descriptor replaced by its checked bytes (``BlobInvalid``)."""
    return _map_payloads(msg, lambda p: read(p) if isinstance(p, BlobRef) else p)


def spill_blobs(msg: Snapshot | Delta, write: Writer, threshold: int) -> Snapshot | Delta:
    """``msg`` with payloads of ``threshold`` bytes or more moved into shared memory."""

    def spill(p: Payload) -> Payload:
        if isinstance(p, bytes) and len(p) >= threshold:
            return write(p) or p
        return p

    return _map_payloads(msg, spill)
