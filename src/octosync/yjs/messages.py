"""The messages of the y-websocket protocol and of Hocuspocus's, and their strict codec.

Both speak y-protocols: a message is a lib0 var uint type, then its fields. y-websocket puts
one document on a socket (the URL names it); Hocuspocus puts the document's name (its
*address*: the name, or the name, a NUL and a session id) before every message, so one socket
carries many documents, and adds its own types: an auth exchange, stateless strings, a
provider's close of one document and ``SyncStatus``, the server's word that an update was
saved. Decoding is total: anything else is ``MalformedYjsMessage`` with the field's path.
"""

from __future__ import annotations

from typing import Final

import msgspec

from octosync.errors import MalformedYjsMessage
from octosync.yjs.encoding import Reader, write_var_bytes, write_var_string, write_var_uint

# y-protocols' message types (the first var uint)
SYNC: Final = 0
AWARENESS: Final = 1
AUTH: Final = 2
QUERY_AWARENESS: Final = 3
# Hocuspocus's own
SYNC_REPLY: Final = 4
"""A sync message that must not be answered with a step 1 of its own."""
STATELESS: Final = 5
BROADCAST_STATELESS: Final = 6
CLOSE: Final = 7
SYNC_STATUS: Final = 8
# y-protocols' sync sub-types
STEP1: Final = 0
STEP2: Final = 1
UPDATE: Final = 2
# auth sub-types (y-protocols: 0 is permission denied; Hocuspocus: token, denied, authenticated)
Y_PERMISSION_DENIED: Final = 0
AUTH_TOKEN: Final = 0
AUTH_DENIED: Final = 1
AUTH_AUTHENTICATED: Final = 2

EMPTY_UPDATE: Final = b"\x00\x00"
"""A Yjs v1 update with no structs and an empty delete set: what a peer with nothing new
answers a step 1 with."""


class SyncStep1(msgspec.Struct, frozen=True):
    """A peer's state vector: answer with what it lacks (step 2)."""

    state_vector: bytes
    ask_back: bool = True
    """Hocuspocus's ``SyncReply`` carries a step 1 that must not be answered by ours."""


class SyncStep2(msgspec.Struct, frozen=True):
    """What the other side lacked, as one update."""

    update: bytes


class SyncUpdate(msgspec.Struct, frozen=True):
    """A live edit."""

    update: bytes


class AwarenessUpdate(msgspec.Struct, frozen=True):
    """y-protocols awareness: ``(client, clock, JSON state)`` entries, encoded."""

    payload: bytes


class QueryAwareness(msgspec.Struct, frozen=True):
    """Asks for every awareness state of the document."""


class AuthToken(msgspec.Struct, frozen=True):
    """Hocuspocus: the token for one document (empty: none), and the provider's version."""

    token: str
    version: str | None = None


class Stateless(msgspec.Struct, frozen=True):
    """Hocuspocus: an application string, never part of the document."""

    payload: str


class CloseDocument(msgspec.Struct, frozen=True):
    """Hocuspocus: the provider detaches from this document (the socket stays open)."""


YMessage = (
    SyncStep1 | SyncStep2 | SyncUpdate | AwarenessUpdate | QueryAwareness | AuthToken | Stateless
) | CloseDocument


class Addressed(msgspec.Struct, frozen=True):
    """A Hocuspocus message and the address it came with."""

    address: str
    message: YMessage

    @property
    def document(self) -> str:
        """The document's name (the address up to a NUL: Hocuspocus's session routing)."""
        return self.address.split("\0", 1)[0]


def _sync(reader: Reader, *, ask_back: bool) -> YMessage:
    kind = reader.var_uint("$.sync")
    if kind == STEP1:
        message: YMessage = SyncStep1(reader.var_bytes("$.state_vector"), ask_back)
    elif kind == STEP2:
        message = SyncStep2(reader.var_bytes("$.update"))
    elif kind == UPDATE:
        message = SyncUpdate(reader.var_bytes("$.update"))
    else:
        raise MalformedYjsMessage(f"unknown sync message type {kind}", path="$.sync")
    reader.end("$")
    return message


def _message(reader: Reader, *, hocuspocus: bool) -> YMessage:
    kind = reader.var_uint("$.type")
    if kind == SYNC or (hocuspocus and kind == SYNC_REPLY):
        return _sync(reader, ask_back=kind == SYNC)
    if kind == AWARENESS:
        message: YMessage = AwarenessUpdate(reader.var_bytes("$.awareness"))
    elif kind == QUERY_AWARENESS:
        message = QueryAwareness()
    elif hocuspocus and kind == AUTH:
        sub = reader.var_uint("$.auth")
        if sub != AUTH_TOKEN:
            raise MalformedYjsMessage(f"a client sends only auth tokens, not {sub}", path="$.auth")
        token = reader.var_string("$.token")
        version = None if reader.done else reader.var_string("$.version")
        message = AuthToken(token, version)
    elif hocuspocus and kind == STATELESS:
        message = Stateless(reader.var_string("$.payload"))
    elif hocuspocus and kind == CLOSE:
        message = CloseDocument()
        reader.at = len(reader.data)  # a reason, when there is one, is not read
    else:
        raise MalformedYjsMessage(f"unknown message type {kind}", path="$.type")
    reader.end("$")
    return message


def decode_y_websocket(data: bytes) -> YMessage:
    """One y-websocket message (the document is the connection's)."""
    return _message(Reader(data), hocuspocus=False)


def decode_hocuspocus(data: bytes) -> Addressed:
    """One Hocuspocus message: its address, then a message."""
    reader = Reader(data)
    address = reader.var_string("$.address")
    return Addressed(address, _message(reader, hocuspocus=True))


# -- what the server sends (bodies: without a Hocuspocus address) ---------------------------


def sync_step1(state_vector: bytes) -> bytes:
    out = bytearray((SYNC, STEP1))
    write_var_bytes(out, state_vector)
    return bytes(out)


def sync_step2(update: bytes) -> bytes:
    out = bytearray((SYNC, STEP2))
    write_var_bytes(out, update)
    return bytes(out)


def sync_update(update: bytes) -> bytes:
    out = bytearray((SYNC, UPDATE))
    write_var_bytes(out, update)
    return bytes(out)


def awareness(payload: bytes) -> bytes:
    out = bytearray((AWARENESS,))
    write_var_bytes(out, payload)
    return bytes(out)


def sync_status(saved: bool) -> bytes:
    """Hocuspocus: the update was saved (1) or refused (0)."""
    return bytes((SYNC_STATUS, 1 if saved else 0))


def authenticated(read_only: bool) -> bytes:
    out = bytearray((AUTH, AUTH_AUTHENTICATED))
    write_var_string(out, "readonly" if read_only else "read-write")
    return bytes(out)


def y_permission_denied(reason: str) -> bytes:
    """y-protocols' auth message: the one refusal a y-websocket provider understands (it
    logs the reason)."""
    out = bytearray((AUTH, Y_PERMISSION_DENIED))
    write_var_string(out, reason)
    return bytes(out)


def permission_denied(reason: str) -> bytes:
    """Hocuspocus's ``PermissionDenied`` (its auth sub-type 1, not y-protocols' 0)."""
    out = bytearray((AUTH, AUTH_DENIED))
    write_var_string(out, reason)
    return bytes(out)


def stateless(payload: str) -> bytes:
    out = bytearray((STATELESS,))
    write_var_string(out, payload)
    return bytes(out)


def address_prefix(address: str) -> bytes:
    """What goes before every body sent on a Hocuspocus document."""
    out = bytearray()
    write_var_string(out, address)
    return bytes(out)


def var_uint(value: int) -> bytes:
    out = bytearray()
    write_var_uint(out, value)
    return bytes(out)
