"""Capability negotiation: both sides' Handshakes in, the session's settings out, or fail closed.

Checked before any Snapshot or Delta is applied (seed § Capability Negotiation, lazily-spec
``codec/capability_handshake.json``): a mismatch is a ``HandshakeFailed`` whose ``path`` names
the field, so a face can report it and close.
"""

from __future__ import annotations

import msgspec

from octosync.errors import HandshakeFailed
from octosync.ipc.messages import Handshake

PROTOCOL_ID = "lazily-ipc"
PROTOCOL_MAJOR_VERSION = 1


class Negotiated(msgspec.Struct, frozen=True):
    """What both sides agreed on; ``max_frame_size`` is the limit for frames in both directions."""

    protocol_major_version: int
    codec: str
    max_frame_size: int
    fragmentation_supported: bool
    session_id: str
    local_peer_id: int
    remote_peer_id: int
    features: tuple[str, ...]
    """Features both sides support, sorted."""


def _fail(field: str, message: str) -> HandshakeFailed:
    return HandshakeFailed(message, path=field)


def negotiate(local: Handshake, remote: Handshake) -> Negotiated:
    """The agreed settings, or ``HandshakeFailed`` naming the first incompatible field.

    Fields are checked in a fixed order, each on both sides, so both ends name the same field.
    """
    for side, hs in (("local", local), ("remote", remote)):
        if hs.protocol_id != PROTOCOL_ID:
            raise _fail(
                "protocol_id", f"{side} protocol_id {hs.protocol_id!r} is not {PROTOCOL_ID!r}"
            )
    if local.protocol_major_version != remote.protocol_major_version:
        raise _fail(
            "protocol_major_version",
            f"major version {remote.protocol_major_version} (remote) != "
            f"{local.protocol_major_version} (local)",
        )
    if local.codec != remote.codec:
        raise _fail("codec", f"codec {remote.codec!r} (remote) != {local.codec!r} (local)")
    sides = (("local", local), ("remote", remote))
    for side, hs in sides:
        if not hs.ordered_reliable:
            raise _fail("ordered_reliable", f"{side} side does not offer ordered reliable delivery")
    for side, hs in sides:
        if hs.max_frame_size <= 0:
            raise _fail("max_frame_size", f"{side} max_frame_size must be positive")
    for side, hs in sides:
        if not hs.session_id:
            raise _fail("session_id", f"{side} session_id is empty")
    if local.session_id != remote.session_id:
        raise _fail(
            "session_id", f"session {remote.session_id!r} (remote) != {local.session_id!r} (local)"
        )
    for side, needs, offers in (
        ("local", local.required_features, remote.features),
        ("remote", remote.required_features, local.features),
    ):
        missing = sorted(set(needs) - set(offers))
        if missing:
            raise _fail("required_features", f"{side} side requires {missing}, not offered")
    return Negotiated(
        protocol_major_version=local.protocol_major_version,
        codec=local.codec,
        max_frame_size=min(local.max_frame_size, remote.max_frame_size),
        fragmentation_supported=local.fragmentation_supported and remote.fragmentation_supported,
        session_id=local.session_id,
        local_peer_id=local.peer_id,
        remote_peer_id=remote.peer_id,
        features=tuple(sorted(set(local.features) & set(remote.features))),
    )
