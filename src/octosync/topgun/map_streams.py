"""TopGun maps as lazily state-plane streams (``map:<name>``): a snapshot, then one delta per
applied batch.

A map is followed from the first time a lazily client asks for its stream (until then the
write path pays nothing for it). Each live key is one node: a stable slot id per key, type tag
``json`` (the MsgPack value re-encoded as JSON, which every lazily dialect and client reads;
an OR-map key's value is the array of its live values, ordered by tag), and the TopGun key as
the node key when it is a valid one (``bounds.NODE_KEY_PATTERN``). A key that appears is a
``node_add``, a changed value a ``cell_set``, a removed key a ``node_remove``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from octosync.bounds import NODE_KEY_MAX, NODE_KEY_PATTERN
from octosync.ipc.messages import (
    CellSet,
    Delta,
    DeltaOp,
    NodeAdd,
    NodeRemove,
    NodeSnapshot,
    Snapshot,
)

TYPE_TAG = "json"
_NODE_KEY = re.compile(NODE_KEY_PATTERN)
_JSON = msgspec.json.Encoder()


def node_key(key: str) -> str | None:
    """The TopGun key as a node key, when it is a valid one."""
    return key if len(key) <= NODE_KEY_MAX and _NODE_KEY.match(key) else None


def to_json(value: Any) -> bytes:
    """A decoded MsgPack value as JSON (bytes as base64, as msgspec writes them)."""
    return _JSON.encode(value)


@dataclass(slots=True)
class _Followed:
    epoch: int = 0
    slots: dict[str, int] = field(default_factory=dict)
    values: dict[str, bytes] = field(default_factory=dict)
    next_slot: int = 1

    def slot(self, key: str) -> int:
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = self.next_slot
            self.next_slot += 1
        return slot


class MapStreams:
    """Which maps are followed, and for each its node ids, JSON values and epoch."""

    def __init__(self) -> None:
        self._maps: dict[str, _Followed] = {}

    def followed(self, name: str) -> bool:
        return name in self._maps

    def any_followed(self) -> bool:
        return bool(self._maps)

    def follow(self, name: str, values: Iterable[tuple[str, bytes]]) -> Snapshot | None:
        """Start following ``name`` with its live ``(key, JSON value)`` pairs; the snapshot to
        publish, or None when it is followed already."""
        if name in self._maps:
            return None
        m = self._maps[name] = _Followed()
        nodes = []
        for key, value in sorted(values):
            m.values[key] = value
            nodes.append(NodeSnapshot(m.slot(key), TYPE_TAG, "resolved", value, node_key(key)))
        return Snapshot(m.epoch, tuple(nodes))

    def changed(self, name: str, values: Mapping[str, bytes | None]) -> Delta | None:
        """Keys of a followed map now hold ``values`` (JSON, None: gone); the delta, or None
        when nothing a subscriber sees changed."""
        m = self._maps.get(name)
        if m is None:
            return None
        ops: list[DeltaOp] = []
        for key, value in values.items():
            old = m.values.get(key)
            if value is None:
                if old is not None:
                    del m.values[key]
                    ops.append(NodeRemove(m.slots.pop(key)))
            elif old is None:
                m.values[key] = value
                ops.append(NodeAdd(m.slot(key), TYPE_TAG, value, node_key(key)))
            elif old != value:
                m.values[key] = value
                ops.append(CellSet(m.slots[key], value))
        if not ops:
            return None
        m.epoch += 1
        return Delta(m.epoch - 1, m.epoch, tuple(ops))
