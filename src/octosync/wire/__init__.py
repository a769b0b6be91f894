"""wire: bytes <-> state-plane messages, one module per dialect, plus stream framing.

Every dialect module has the same surface (``Codec``), so a face picks one by name once
(for instance from the handshake's ``codec``) and never branches on it again.
"""

from __future__ import annotations

from typing import Protocol

from octosync.errors import LocalProtocolError
from octosync.ipc.messages import Handshake, IpcMessage
from octosync.wire import json, json_tagged, msgpack
from octosync.wire.strict import Buffer


class Codec(Protocol):
    DIALECT: str

    def encode(self, message: IpcMessage) -> bytes: ...

    def decode(self, data: Buffer) -> IpcMessage: ...

    def encode_handshake(self, handshake: Handshake) -> bytes: ...

    def decode_handshake(self, data: Buffer) -> Handshake: ...


DIALECTS: dict[str, Codec] = {
    json.DIALECT: json,
    json_tagged.DIALECT: json_tagged,
    msgpack.DIALECT: msgpack,
}


def dialect(name: str) -> Codec:
    """The codec module for ``json`` (seed), ``json_tagged`` (lazily-spec) or ``msgpack``."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise LocalProtocolError(f"unknown wire dialect {name!r}", path="codec") from None
