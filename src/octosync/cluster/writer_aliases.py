"""Writers on other nodes, as this node's producers see them, sans-I/O.

A writer's ``RemoteOp`` to a stream owned here arrives stamped with its connection id on its
own node; ids are per node, so this node gives each (node, connection) a connection id of its
own: the ``peer`` its producer sees, and the way back for the producer's answer. The latest
``capacity`` writers keep theirs, so the table is bounded whatever other nodes send.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

Origin = tuple[str, int]
"""A writer: its node, and its connection id there."""


class WriterAliases:
    def __init__(self, new_id: Callable[[], int], capacity: int = 65_536) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._new_id = new_id
        self.capacity = capacity
        self._alias: OrderedDict[Origin, int] = OrderedDict()
        self._origin: dict[int, Origin] = {}

    def __len__(self) -> int:
        return len(self._alias)

    def alias(self, node: str, peer: int) -> int:
        """This node's id for writer ``peer`` of ``node`` (the same while it stays among the
        latest ``capacity`` writers seen)."""
        key = (node, peer)
        known = self._alias.get(key)
        if known is not None:
            self._alias.move_to_end(key)
            return known
        if len(self._alias) >= self.capacity:
            _, dropped = self._alias.popitem(last=False)
            del self._origin[dropped]
        alias = self._alias[key] = self._new_id()
        self._origin[alias] = key
        return alias

    def origin(self, alias: int) -> Origin | None:
        """The writer an alias stands for (None: not one, or forgotten since)."""
        return self._origin.get(alias)
