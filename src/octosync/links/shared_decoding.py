"""Work that devices sharing one process may share: decoding the head's broadcast, merging it.

A head encodes each state update once and sends the same bytes to every device. Devices that
live in one process (a simulator such as ``bench/chain.py``, a relay) would each decode, check
and merge those bytes. Both steps are pure functions of their inputs, and decoded values are
never mutated (states are replaced, ``merge_patch`` copies what it changes), so a device may
take another's result: identical bytes give the frame already decoded, and the same update
merged into the same state object gives the state already computed. Nothing a device sees
changes, only what it costs; devices in separate processes share nothing.
"""

from __future__ import annotations

from collections import OrderedDict

from octosync.chain.json_tree import JsonTree, merge_patch
from octosync.wire import chain_link

CAPACITY = 64
"""Recent entries kept; devices of one process read each broadcast within a few loop turns."""


class SharedDecoding:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._frames: OrderedDict[bytes, chain_link.AnyFrame] = OrderedDict()
        self._merges: OrderedDict[tuple[int, int], tuple[JsonTree, JsonTree, JsonTree]] = (
            OrderedDict()
        )
        self.decoded = 0
        """Frames actually decoded (the rest were shared)."""
        self.merged = 0

    def decode(self, payload: bytes) -> chain_link.AnyFrame:
        frame = self._frames.get(payload)
        if frame is None:
            frame = chain_link.decode(payload)  # a bad frame raises and is not kept
            self.decoded += 1
            self._frames[payload] = frame
            if len(self._frames) > self.capacity:
                self._frames.popitem(last=False)
        return frame

    def merge(self, state: JsonTree, patch: JsonTree) -> JsonTree:
        """``merge_patch(state, patch)``, computed once per (state object, patch object)."""
        key = (id(state), id(patch))
        entry = self._merges.get(key)
        if entry is not None and entry[0] is state and entry[1] is patch:
            return entry[2]  # the objects themselves are held, so their ids were not reused
        result = merge_patch(state, patch)
        self.merged += 1
        self._merges[key] = (state, patch, result)
        if len(self._merges) > self.capacity:
            self._merges.popitem(last=False)
        return result
