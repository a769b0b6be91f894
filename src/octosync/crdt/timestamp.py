"""HLC timestamp: the total order every CRDT in octosync (and the Spark pipeline) agrees on."""

from __future__ import annotations

from typing import Annotated

import msgspec

from octosync.bounds import MAX_HLC_COUNTER

Millis = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Counter = Annotated[int, msgspec.Meta(ge=0, le=MAX_HLC_COUNTER)]
NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=r"^[^:]+$")]
"""A node id may not contain ``:`` because ``key:millis:counter:nodeId`` is hashed for Merkle."""


class Timestamp(msgspec.Struct, frozen=True, order=True, forbid_unknown_fields=True, gc=False):
    """``(millis, counter, node_id)``, compared in that order; node ids compare as UTF-8 bytes.

    Python compares ``str`` by code point, which is the same order as their UTF-8 bytes, so the
    generated ordering is the byte order the reference implementation specifies. Untracked
    by the cycle collector (``gc=False``): it holds an int pair and a string, never a cycle.
    """

    millis: Millis
    counter: Counter
    node_id: NodeName

    def __str__(self) -> str:
        return f"{self.millis}:{self.counter}:{self.node_id}"
