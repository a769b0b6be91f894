"""Stream names carry their face: ``warp:<u64>`` is a WVP stream, every other name a lazily one.

The naming rule alone, below every package, so the codecs (``wire.cluster``) and the hub
(``hub.streams``, which adds what each face may do with a name) read it from one place.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final, Literal

Face = Literal["lazily", "wvp"]
"""The stream namespace a connection may name (``hub.streams``)."""
WARP_PREFIX: Final = "warp:"


def warp_stream_id(warp_id: int) -> str:
    """The hub's name for WVP warp ``warp_id``."""
    return f"{WARP_PREFIX}{warp_id}"


def warp_id_of(stream: Hashable) -> int:
    """The warp id inside a WVP stream name (inverse of ``warp_stream_id``)."""
    if not isinstance(stream, str) or not stream.startswith(WARP_PREFIX):
        raise ValueError(f"{stream!r} is not a WVP stream name")
    return int(stream[len(WARP_PREFIX) :])


def stream_face(stream: Hashable) -> Face:
    return "wvp" if isinstance(stream, str) and stream.startswith(WARP_PREFIX) else "lazily"
