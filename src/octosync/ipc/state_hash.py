"""BLAKE3-256 over a canonical encoding of a mirrored state, the same whatever the dialect.

Canonical encoding (version ``octosync/state/1``): a MessagePack array
``["octosync/state/1", nodes, edges]`` where

- ``nodes`` is one array per node, sorted by id: ``[id, type_tag, state, payload, key]``;
  ``payload`` is bin, nil, or ``[offset, len, generation, epoch, checksum, backend]`` for a
  blob reference; ``key`` is a string or nil;
- ``edges`` is ``[dependent, dependency]`` pairs, sorted, without duplicates;
- integers use their shortest MessagePack form, strings are UTF-8 ``str``, no maps anywhere.

Neither the epoch nor the roots are hashed: the epoch is checked separately by the gap rule, and
roots cannot be maintained by deltas (no op carries them), so a mirror could not reproduce them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import blake3
import msgspec

from octosync.ipc.messages import BlobRef, Edge, NodeSnapshot, NodeState, Payload, Snapshot

VERSION = "octosync/state/1"

NodeRow = tuple[int, str, NodeState, Payload | None, str | None]
"""``(id, type_tag, state, payload, key)``: one node as the hash sees it."""

_encoder = msgspec.msgpack.Encoder()


def _payload_term(payload: Payload | None) -> object:
    if isinstance(payload, BlobRef):
        return (
            payload.offset,
            payload.len,
            payload.generation,
            payload.epoch,
            payload.checksum,
            payload.backend,
        )
    return payload


def hash_rows(rows: Sequence[NodeRow], edges: Iterable[tuple[int, int]]) -> bytes:
    """Hash node rows (already sorted by id) and edge pairs (any order, duplicates ignored)."""
    nodes = [
        (sid, tag, state, _payload_term(payload), key) for sid, tag, state, payload, key in rows
    ]
    canonical = _encoder.encode((VERSION, nodes, sorted(set(edges))))
    return blake3.blake3(canonical).digest()


def state_hash(nodes: Iterable[NodeSnapshot], edges: Iterable[Edge]) -> bytes:
    """The 32-byte state hash of these nodes and edges, independent of their order."""
    rows = sorted(
        ((n.slot_id, n.type_tag, n.state, n.payload, n.key) for n in nodes),
        key=lambda row: row[0],
    )
    return hash_rows(rows, ((e.dependent, e.dependency) for e in edges))


def snapshot_hash(snapshot: Snapshot) -> bytes:
    """The state hash a Snapshot's ``state_hash`` field should carry."""
    return state_hash(snapshot.nodes, snapshot.edges)
