"""The ``/chain/{name}`` face's protocol object: a browser device's records, relayed to the
chain's head (``server.chain_face`` finds the head and reads its answers).

Each WebSocket text message is a ``DeviceToHead`` record in the seed's JSON, decoded strictly;
the first must be ``BootstrapChainRequest`` (the protocol starts every connection with one). The
session only translates: the head decides everything else. With a journal, each record goes
through ``record`` first, which journals its device events and relays the record once they
are committed (in the order the device sent them), so the pipeline sees every event the face
relayed. It runs in the shared loop of
``server.connection``, so credentials, frame limits, the input budget, token expiry, deadlines
and the shutdown drain are the same as on every other face.
"""

from __future__ import annotations

from collections.abc import Callable

from octosync.chain.records import BootstrapChainRequest, DeviceEvent, DeviceToHead
from octosync.errors import HandshakeFailed, OctosyncError
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import FaceName
from octosync.server.ports import Credentials
from octosync.wire import chain_link
from octosync.wire.chain import ChainCodec, encode_error_record
from octosync.wire.websocket import ws_frame

FROM_DEVICE: ChainCodec[DeviceToHead] = ChainCodec(DeviceToHead, "json")
Record = Callable[[list[DeviceEvent], Callable[[], None]], None]
"""Journal a record's device events, then call the continuation (which relays the record)."""


def device_events(message: DeviceToHead) -> list[DeviceEvent]:
    """The device events a record carries: a bootstrap re-sends the ones the device holds."""
    if isinstance(message, BootstrapChainRequest):
        return [message.events[s] for s in sorted(message.events)]
    return [message]


class ChainSession:
    face = FaceName.CHAIN
    byte_stream = False
    offload_decode = False

    def __init__(
        self,
        rt: Credentials,
        identity: ClaimGrants,
        to_head: Callable[[bytes], None],
        on_close: Callable[[], None],
        record: Record | None = None,
    ) -> None:
        self._identity = identity
        self._to_head = to_head
        self._record = record
        self._on_close = on_close
        self._ready = False
        self.max_frame = rt.max_frame
        self.outgoing: list[bytes] = []

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def identity(self) -> ClaimGrants:
        return self._identity

    def decode(self, data: bytes) -> DeviceToHead:
        return FROM_DEVICE.decode(data)

    def handle(self, message: DeviceToHead) -> None:
        if not self._ready:
            if not isinstance(message, BootstrapChainRequest):
                raise HandshakeFailed("the first record must be BootstrapChainRequest", path="Type")
            self._ready = True
        data = chain_link.encode(chain_link.FromDevice(0, message))
        if self._record is None:
            self._to_head(data)
        else:
            self._record(device_events(message), lambda: self._to_head(data))

    def error_frame(self, err: OctosyncError) -> bytes:
        return ws_frame(encode_error_record(err.name, err.message), text=True)

    def send_error(self, err: OctosyncError) -> None:
        self.outgoing.append(self.error_frame(err))

    def close(self) -> None:
        self._on_close()
