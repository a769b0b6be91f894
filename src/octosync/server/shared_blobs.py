"""Shared-memory blobs on the lazily face: ``shared-blob`` negotiated per session.

- A producer that negotiated ``shared-blob`` names its region in the handshake
  (``shm-region:<name>``); each descriptor it sends is checked against that region's arena
  (bounds, header, generation, epoch, length, checksum) and inlined before the hub sees the
  frame, so the journal, late joiners, other nodes and every other subscriber hold bytes,
  never a reference to memory the producer may reuse. A descriptor from a session that did not
  negotiate the feature is refused (``FeatureNotNegotiated``), as is a bad one
  (``BlobInvalid``); the frame changes nothing.
- A subscriber that negotiated it gets its frames through a ``+shm`` encoder: payloads of
  ``shm_threshold`` bytes or more are written into the server's own region (made on first
  use, named in that subscriber's handshake reply) and sent as descriptors, once per frame for
  all such subscribers. Everyone else gets inline bytes.
"""

from __future__ import annotations

import os
from dataclasses import replace

from octosync.errors import FeatureNotNegotiated
from octosync.hub import Hub
from octosync.hub.types import Encoder, OutFrame
from octosync.ipc.blobs import has_blobs, inline_blobs, spill_blobs
from octosync.ipc.messages import BlobRef, Delta, Snapshot
from octosync.server.view_encoders import lazily_view_key, view_encoders
from octosync.shm.region import REGION_FEATURE, SHARED_BLOB, SharedRegion, fresh_name
from octosync.wire.lazily_dialects import DIALECT_SET

SHM_SUFFIX = "+shm"
REGION_EPOCH = 0
"""The validity epoch stamped on the server's blobs (lazily-py's ``ShmBackend`` reads only
descriptors of its current epoch, which starts at 0)."""


class ServerBlobs:
    """The server's region for subscribers, made on first use, and the ``+shm`` encoders."""

    def __init__(self, hub: Hub, *, capacity: int, threshold: int) -> None:
        self.capacity = capacity
        self.threshold = threshold
        self._region: SharedRegion | None = None
        base = view_encoders()
        for dialect in DIALECT_SET.values():
            for transport in ("ws", "tcp"):
                key = lazily_view_key(dialect, transport)
                hub.register_encoder(key + SHM_SUFFIX, self._spilling(base[key]))

    @property
    def region(self) -> SharedRegion:
        if self._region is None:
            self._region = SharedRegion.create(fresh_name(f"octosync-{os.getpid()}"), self.capacity)
        return self._region

    def _write(self, payload: bytes) -> BlobRef | None:
        """Into the region; None (sent inline) when it could never fit there."""
        region = self.region
        if len(payload) > region.arena.max_blob_len:
            return None
        return region.write(REGION_EPOCH, payload)

    def _spilling(self, encode: Encoder) -> Encoder:
        def spill_then_encode(frame: OutFrame) -> bytes:
            body = frame.body
            if isinstance(body, Snapshot | Delta):
                body = spill_blobs(body, self._write, self.threshold)
            return encode(replace(frame, body=body))

        return spill_then_encode

    def close(self) -> None:
        if self._region is not None:
            self._region.close()
            self._region = None


class SessionBlobs:
    """One lazily session's side of the feature: what it negotiated, its producer's region."""

    def __init__(self, server: ServerBlobs) -> None:
        self.server = server
        self.negotiated = False
        self.peer_region: SharedRegion | None = None

    def negotiate(self, features: tuple[str, ...], *, publish: bool) -> tuple[str, ...]:
        """Take the peer's features; returns what the server's reply adds to its own."""
        self.negotiated = SHARED_BLOB in features
        if not self.negotiated:
            return ()
        names = [f[len(REGION_FEATURE) :] for f in features if f.startswith(REGION_FEATURE)]
        if publish:
            if names:
                self.peer_region = SharedRegion.open(names[0])
            return ()
        return (REGION_FEATURE + self.server.region.name,)

    def view_suffix(self, *, publish: bool) -> str:
        return SHM_SUFFIX if self.negotiated and not publish else ""

    def inbound(self, msg: Snapshot | Delta) -> tuple[Snapshot | Delta, bool]:
        """``(msg with its descriptors inlined, whether it had any)``."""
        if not has_blobs(msg):
            return msg, False
        if not self.negotiated:
            raise FeatureNotNegotiated(
                "a shared-blob descriptor on a session that did not negotiate 'shared-blob'",
                path="payload",
            )
        if self.peer_region is None:
            raise FeatureNotNegotiated(
                "a shared-blob descriptor, but the handshake named no 'shm-region:' to read it",
                path="payload",
            )
        return inline_blobs(msg, self.peer_region.read), True

    def close(self) -> None:
        if self.peer_region is not None:
            self.peer_region.close()
            self.peer_region = None
