"""The ``/chain/{name}`` face's protocol object: a browser device's records, relayed to the
chain's head (``server.chain_face`` finds the head and reads its answers).

Each WebSocket text message is a ``DeviceToHead`` record in the seed's JSON, decoded strictly;
the first must be ``BootstrapChainRequest`` (the protocol starts every connection with one). The
session only translates: the head decides everything else. It runs in the shared loop of
``server.connection``, so credentials, frame limits, the input budget, token expiry, deadlines
and the shutdown drain are the same as on every other face.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from octosync.chain.records import BootstrapChainRequest, DeviceToHead
from octosync.errors import HandshakeFailed, OctosyncError
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.runtime import Runtime
from octosync.wire import chain_link
from octosync.wire.chain import ChainCodec
from octosync.wire.websocket import ws_frame

FROM_DEVICE: ChainCodec[DeviceToHead] = ChainCodec(DeviceToHead, "json")


class _ErrorRecord(msgspec.Struct, frozen=True, rename="pascal"):
    type: str
    code: str
    message: str


_errors = msgspec.json.Encoder()


class ChainSession:
    face = FaceName.CHAIN
    byte_stream = False
    offload_decode = False

    def __init__(
        self,
        rt: Runtime,
        identity: ClaimGrants,
        to_head: Callable[[bytes], None],
        on_close: Callable[[], None],
    ) -> None:
        self._identity = identity
        self._to_head = to_head
        self._on_close = on_close
        self._ready = False
        self.max_frame = rt.limits.max_frame_bytes
        self.outgoing: list[bytes] = []

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def identity(self) -> ClaimGrants:
        return self._identity

    def decode(self, data: bytes) -> object:
        return FROM_DEVICE.decode(data)

    def handle(self, message: object) -> None:
        if not self._ready:
            if not isinstance(message, BootstrapChainRequest):
                raise HandshakeFailed("the first record must be BootstrapChainRequest", path="Type")
            self._ready = True
        assert isinstance(message, DeviceToHead)
        self._to_head(chain_link.encode(chain_link.FromDevice(0, message)))

    def error_frame(self, err: OctosyncError) -> bytes:
        record = _ErrorRecord("Error", err.name, err.message)
        return ws_frame(_errors.encode(record), text=True)

    def send_error(self, err: OctosyncError) -> None:
        self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        self._on_close()
