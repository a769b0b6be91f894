"""A warp's frames as the WARP View Protocol carries them: a full graph at an epoch, or ops
from one epoch to the next. They live here, below ``wire/`` and ``hub/``, so the hub can name
the bodies its WVP streams carry and a consumer can follow them without importing a wire
format; ``wire.wvp`` encodes and decodes them inside its messages."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

U64 = Annotated[int, msgspec.Meta(ge=0)]
"""msgspec itself refuses integers beyond the u64 range."""


class WarpSnapshot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The producer's whole graph at ``epoch`` (its own data, carried untouched)."""

    epoch: U64
    graph: Any
    state_hash: bytes | None = None


class WarpDiff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The producer's ops from ``from_epoch`` to ``to_epoch`` (its own data, untouched)."""

    from_epoch: U64
    to_epoch: U64
    ops: Any
    state_hash: bytes | None = None
