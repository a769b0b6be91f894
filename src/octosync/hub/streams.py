"""Stream names carry their face, so a lazily stream and a WVP stream are never the same stream.

WVP streams are ``warp:<u64>``; every other name is a lazily state-plane stream, and a lazily
peer may not name a stream with the reserved ``warp:`` prefix. The hub refuses a connection of
one face that names a stream of the other (``Forbidden``), so a frame can only ever reach the
encoders of the face that produced it.

``map:<name>`` streams are lazily streams the server itself produces: TopGun map ``<name>``
as a read-only view (``topgun.map_streams``). Lazily peers subscribe to them like any other,
but none may produce one or write to it (``ForbiddenPublish``, ``Forbidden``).

Chain streams are ``chain:<name>``: lazily streams carrying a chain's computed state
(``octosync chain publish``). Only the chain's publisher may produce one: a connection needs
``publish`` on the stream *and* on its publisher scope ``$chain:<name>``. Names starting with
``$`` are never granted by a wildcard, so a token granting ``publish`` on ``*`` cannot pose as
the chain. The chain's state changes only through its devices' events, so nobody may ``write``
to a chain stream (the publisher would have nothing to do with the write).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

from octosync.errors import Forbidden, ForbiddenPublish
from octosync.hub.types import Face, Grants

__all__ = ["Face"]
WARP_PREFIX: Final = "warp:"
MAP_PREFIX: Final = "map:"
CHAIN_PREFIX: Final = "chain:"
SERVER_PRODUCER: Final = -1
"""The producer id of the streams the server produces (no connection has it)."""


def map_stream_id(map_name: str) -> str:
    """The lazily stream that shows TopGun map ``map_name``."""
    return f"{MAP_PREFIX}{map_name}"


def map_name_of(stream: Hashable) -> str | None:
    """The TopGun map a ``map:`` stream shows; None for any other stream."""
    if isinstance(stream, str) and stream.startswith(MAP_PREFIX):
        return stream[len(MAP_PREFIX) :]
    return None


def check_peer_may_produce(stream: Hashable) -> None:
    """``ForbiddenPublish`` for a stream only the server produces."""
    if map_name_of(stream) is not None:
        raise ForbiddenPublish(
            f"stream {stream!r} is the server's view of a TopGun map; it is read-only",
            path="stream",
        )


def check_peer_may_write(stream: Hashable) -> None:
    """``Forbidden`` for a write to a read-only stream: one the server produces (``map:``) or
    a chain's state (``chain:``)."""
    check_chain_write(stream)
    if map_name_of(stream) is not None:
        raise Forbidden(
            f"stream {stream!r} is read-only: write the TopGun map on /topgun", path="stream"
        )


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


def check_face(face: Face, stream: Hashable) -> None:
    """``Forbidden`` when ``stream`` belongs to another face than ``face``."""
    owner = stream_face(stream)
    if owner != face:
        raise Forbidden(
            f"stream {stream!r} belongs to the {owner} face, not the {face} face", path="stream"
        )


def chain_stream_id(chain: str) -> str:
    """The hub's name for the computed state of chain ``chain``."""
    return f"{CHAIN_PREFIX}{chain}"


def is_chain_stream(stream: Hashable) -> bool:
    return isinstance(stream, str) and stream.startswith(CHAIN_PREFIX)


def chain_publisher_scope(stream: str) -> str:
    """The grant that makes a connection the publisher of chain stream ``stream``."""
    return f"${stream}"


def check_chain_publisher(grants: Grants, stream: Hashable) -> None:
    """``Forbidden`` when ``stream`` is a chain stream and ``grants`` do not name its publisher."""
    if not is_chain_stream(stream):
        return
    assert isinstance(stream, str)
    scope = chain_publisher_scope(stream)
    if not grants.allows(scope, "publish"):
        raise Forbidden(
            f"stream {stream!r} is a chain's state: only its publisher (granted publish on "
            f"{scope!r}) may produce it",
            path="stream",
        )


def check_chain_write(stream: Hashable) -> None:
    """``Forbidden`` for a write to a chain stream: its state changes only through events."""
    if is_chain_stream(stream):
        raise Forbidden(
            f"stream {stream!r} is a chain's state: it changes only through the chain's events",
            path="stream",
        )
